# Two commands matter: `make demo` (the main job, on embedded defaults) and `make test` (everything CI runs).
.PHONY: demo test bench fmt help readme-long

demo:
	cargo run --release --locked -- demo

test:
	scripts/test.sh

bench:
	cargo bench --locked --bench capsule_build

# The README's long blocks (the real control plane, as written: scripts/k8s-up.sh, dev on port 8080,
# hello-cpu, both capsule paths, k8s-down). Needs no other cluster running on this machine.
readme-long:
	AWS_EC2_METADATA_DISABLED=true cargo test --locked --test readme -- --ignored --nocapture

fmt:
	cargo fmt --all

# Every script in scripts/, one line each (a unit test of the `tuneplane` crate checks none is missing).
help:
	@echo "make targets:"
	@echo "  make demo    the example job end to end on this machine (tuneplane demo, release build)"
	@echo "  make test    everything CI runs (scripts/test.sh)"
	@echo "  make bench   the capsule build benchmark"
	@echo "  make fmt     cargo fmt --all"
	@echo "  make readme-long  the README's real-control-plane block as written (tests/readme.rs)"
	@echo "  make help    this list"
	@echo "scripts/ (run from the repository root):"
	@echo "  scripts/bootstrap-venv.sh     creates .venv/ with the pinned Python test tools (moto_server)"
	@echo "  scripts/fuzz.sh               runs the fuzz targets for a bounded time each (not part of the tests)"
	@echo "  scripts/k8s-down.sh           stops the control plane scripts/k8s-up.sh started"
	@echo "  scripts/k8s-up.sh             a real Kubernetes control plane and KubeRay on 127.0.0.1 (the real test tier)"
	@echo "  scripts/kueue-build.sh        builds the Kueue controller manager once per machine (for kueue-compare.sh)"
	@echo "  scripts/kueue-compare.sh      TunePlane and Kueue side by side on one real control plane (BENCHMARKS.md)"
	@echo "  scripts/moto-serial.py        moto_server with one lock around its backends (started by with-moto.sh)"
	@echo "  scripts/sam-build.sh          builds the three Lambda bootstraps as a deployer does (sam build)"
	@echo "  scripts/test.sh               the one test command (make test; CI runs it)"
	@echo "  scripts/testenv-build.sh      builds the real tier's Kubernetes components once per machine"
	@echo "  scripts/testenv-lib.sh        sourced by the testenv build scripts (not run directly)"
	@echo "  scripts/testenv-netpol.sh     builds the real tier's NetworkPolicy evaluator once per machine"
	@echo "  scripts/testenv-enforcer.sh   builds the real tier's NetworkPolicy enforcer (kube-router's firewall) once per machine"
	@echo "  scripts/testenv-runtimes.sh   builds the runtimes that play container images on the real tier"
	@echo "  scripts/with-moto.sh CMD      runs CMD with a private local S3 + DynamoDB (moto) on 127.0.0.1"
