#!/bin/bash
# Prints team-b's submission, decision and pod create in a `--workloads fair` run directory of
# scripts/kueue-compare.sh (see benches/results/README.md).
D=$1
grep "team-b's wait\|decision p50\|team-a jobs admitted before\|admitted per second\|first pod bound\|load average" $D/results.md
for q in 50 200 500; do L=$D/tuneplane-q$q-fair/tuneplane.log; A=$D/tuneplane-q$q-fair/cluster-logs/audit.log; [ -f $L ] || continue
id=$(grep "tenant=team-b" $L | grep -o "job_id=[^ ]*" | head -1); id=${id#job_id=}
sub=$(grep "submitted job_id=$id" $L | cut -c12-23); dec=$(grep "admitted job_id=$id" $L | cut -c12-23)
cr=$(grep "tp-$id" $A | python3 -c "import sys,json; print(json.loads(sys.stdin.readline())['stageTimestamp'][11:23])")
python3 -c "
import sys
def s(t): h,m,x=t.split(':'); return int(h)*3600+int(m)*60+float(x)
sub,dec,cr='$sub','$dec','$cr'
print('q$q b submitted', sub, 'decided +%.2f s' % (s(dec)-s(sub)), 'pod created +%.2f s' % (s(cr)-s(sub)))"
done
