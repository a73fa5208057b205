//! The job's callbacks (`notify`).

use super::*;
use crate::spec::notify;

impl Checker {
    /// The job's callbacks: at most [`notify::MAX_NOTIFY`], each a checked URL, known events
    /// (none: every event) and a known format.
    pub(super) fn notify(
        &mut self,
        map: &Map<String, Value>,
        allow_loopback: bool,
    ) -> Vec<notify::Notify> {
        let list = match map.get("notify") {
            None | Some(Value::Null) => return Vec::new(),
            Some(Value::Array(list)) => list,
            Some(other) => {
                self.err(
                    "notify",
                    format!(
                        "must be a list like [{{url: https://hooks.example.com/x, events: [terminal]}}], not {}",
                        type_name(other)
                    ),
                );
                return Vec::new();
            }
        };
        if list.len() > notify::MAX_NOTIFY {
            self.err(
                "notify",
                format!(
                    "{} callbacks; at most {} per job (a tenant subscription covers every job)",
                    list.len(),
                    notify::MAX_NOTIFY
                ),
            );
        }
        let mut out = Vec::new();
        for (i, item) in list.iter().enumerate().take(notify::MAX_NOTIFY) {
            let p = format!("notify[{i}]");
            let Some(m) = item.as_object() else {
                self.err(
                    &p,
                    format!(
                        "must be a mapping with url and events, not {}",
                        type_name(item)
                    ),
                );
                continue;
            };
            self.unknown_fields(m, NOTIFY_FIELDS, &format!("{p}."));
            let url = self
                .string(m, "url", &format!("{p}.url"), true)
                .and_then(|u| match notify::check_url(&u, allow_loopback) {
                    Ok(_) => Some(u),
                    Err(why) => {
                        self.err(format!("{p}.url"), format!("{u:?}: {why}"));
                        None
                    }
                });
            let events = match m.get("events") {
                None | Some(Value::Null) => Ok(Vec::new()),
                Some(Value::Array(names)) => names
                    .iter()
                    .map(|n| {
                        n.as_str()
                            .map(str::to_owned)
                            .ok_or_else(|| format!("event names are strings, not {}", type_name(n)))
                    })
                    .collect::<Result<Vec<String>, String>>(),
                Some(other) => Err(format!(
                    "must be a list of event names, not {}",
                    type_name(other)
                )),
            }
            .and_then(|names| notify::parse_events(&names));
            let events = match events {
                Ok(e) => Some(e),
                Err(why) => {
                    self.err(format!("{p}.events"), why);
                    None
                }
            };
            let format = match m.get("format") {
                None | Some(Value::Null) => Some(notify::Format::Json),
                Some(Value::String(f)) => notify::Format::parse(f)
                    .map_err(|why| self.err(format!("{p}.format"), why))
                    .ok(),
                Some(other) => {
                    self.err(
                        format!("{p}.format"),
                        format!("must be json or slack, not {}", type_name(other)),
                    );
                    None
                }
            };
            if let (Some(url), Some(events), Some(format)) = (url, events, format) {
                out.push(notify::Notify {
                    url,
                    events,
                    format,
                });
            }
        }
        out
    }
}
