//! Reads: paginated lists with selectors, and the start of a watch (backlog + live receiver).

use std::sync::Arc;

use serde_json::Value;
use tokio::sync::broadcast;

use super::{EventType, Store, WatchEvent};
use crate::error::StatusError;
use crate::resources::ResourceType;
use crate::selector::{FieldSelector, LabelSelector};

/// What a list or watch selects.
#[derive(Debug, Clone, Default)]
pub struct ListQuery {
    /// Namespace, or `None` for all namespaces.
    pub namespace: Option<String>,
    /// Label selector.
    pub labels: LabelSelector,
    /// Field selector.
    pub fields: FieldSelector,
}

impl ListQuery {
    /// Whether an object is selected.
    pub fn matches(&self, obj: &Value) -> bool {
        self.namespace
            .as_deref()
            .is_none_or(|ns| crate::json::namespace(obj) == ns)
            && self.labels.matches(obj)
            && self.fields.matches(obj)
    }
}

/// One page of a list.
#[derive(Debug)]
pub struct ListPage {
    /// resourceVersion the list is consistent with.
    pub rv: u64,
    /// Selected objects.
    pub items: Vec<Arc<Value>>,
    /// Continue token for the next page.
    pub next: Option<String>,
}

/// The start of a watch.
#[derive(Debug)]
pub struct WatchStart {
    /// Events to send first.
    pub backlog: Vec<Arc<WatchEvent>>,
    /// Every later change (of every type).
    pub rx: broadcast::Receiver<Arc<WatchEvent>>,
    /// The latest resourceVersion when the watch started: everything up to it is in the backlog
    /// or was before `from`.
    pub rv: u64,
}

impl Store {
    /// Lists objects, `limit` at a time, resuming after a continue token.
    pub fn list(
        &self,
        rt: &'static ResourceType,
        q: &ListQuery,
        limit: Option<usize>,
        cont: Option<&str>,
    ) -> Result<ListPage, StatusError> {
        let (rv_token, after) = match cont {
            Some(c) if !c.is_empty() => {
                let (rv, key) = c
                    .split_once(':')
                    .ok_or_else(|| StatusError::bad_request("invalid continue token"))?;
                let (ns, name) = key
                    .split_once('/')
                    .ok_or_else(|| StatusError::bad_request("invalid continue token"))?;
                let rv: u64 = rv
                    .parse()
                    .map_err(|_| StatusError::bad_request("invalid continue token"))?;
                (Some(rv), Some((ns.to_string(), name.to_string())))
            }
            _ => (None, None),
        };
        let inner = self.lock();
        let rv = rv_token.unwrap_or(inner.rv);
        let Some(table) = inner.tables.get(rt.plural) else {
            return Ok(ListPage {
                rv,
                items: Vec::new(),
                next: None,
            });
        };
        let limit = limit.filter(|l| *l > 0).unwrap_or(usize::MAX);
        let range = match &after {
            Some(key) => table.range::<(String, String), _>((
                std::ops::Bound::Excluded(key),
                std::ops::Bound::Unbounded,
            )),
            None => table.range::<(String, String), _>(..),
        };
        let mut items = Vec::new();
        let mut next = None;
        for ((ns, _), obj) in range {
            if q.namespace.as_deref().is_some_and(|want| want != ns) || !q.matches(obj) {
                continue;
            }
            if items.len() == limit {
                // There is at least one more: resume after the last returned item.
                let last = items.last().map(|o: &Arc<Value>| {
                    format!("{}/{}", crate::json::namespace(o), crate::json::name(o))
                });
                next = last.map(|k| format!("{rv}:{k}"));
                break;
            }
            items.push(obj.clone());
        }
        Ok(ListPage { rv, items, next })
    }

    /// Starts a watch of `rt` from resourceVersion `from`.
    ///
    /// `None` (or `0`) means "now": the backlog is a synthetic `ADDED` event for every current object.
    /// Otherwise the backlog is every retained event after `from`; `410 Gone` when events after
    /// `from` were dropped from the history. The receiver then yields every later change.
    pub fn watch_from(
        &self,
        rt: &'static ResourceType,
        from: Option<u64>,
    ) -> Result<WatchStart, StatusError> {
        let inner = self.lock();
        // Subscribing under the lock means no change can fall between backlog and live events.
        let rx = self.tx.subscribe();
        let backlog = match from {
            None | Some(0) => inner
                .tables
                .get(rt.plural)
                .map(|t| {
                    t.values()
                        .map(|o| {
                            let rv = crate::json::str_at(o, "/metadata/resourceVersion")
                                .and_then(|s| s.parse().ok())
                                .unwrap_or(inner.rv);
                            Arc::new(WatchEvent {
                                rv,
                                rt,
                                ty: EventType::Added,
                                object: o.clone(),
                                old: None,
                            })
                        })
                        .collect()
                })
                .unwrap_or_default(),
            Some(rv) if rv < inner.compacted => return Err(StatusError::gone(rv)),
            Some(rv) => inner
                .history
                .iter()
                .filter(|e| e.rv > rv && std::ptr::eq(e.rt, rt))
                .cloned()
                .collect(),
        };
        Ok(WatchStart {
            backlog,
            rx,
            rv: inner.rv,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::{NAMESPACES, PODS};
    use serde_json::json;

    fn store_with_pods(n: usize) -> Store {
        let store = Store::new(100);
        let _ = store.create(&NAMESPACES, "", json!({"metadata": {"name": "default"}}));
        for i in 0..n {
            let _ = store.create(&PODS, "default", json!({"metadata": {"name": format!("p{i:02}"), "labels": {"i": i.to_string()}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}));
        }
        store
    }

    #[test]
    fn pages_cover_every_item_once() {
        let store = store_with_pods(7);
        let q = ListQuery::default();
        let mut seen = Vec::new();
        let mut cont: Option<String> = None;
        for _ in 0..10 {
            let page = store
                .list(&PODS, &q, Some(3), cont.as_deref())
                .map_err(|e| e.message);
            let page = page.unwrap_or_else(|m| panic!("{m}"));
            seen.extend(page.items.iter().map(|o| crate::json::name(o).to_string()));
            cont = page.next;
            if cont.is_none() {
                break;
            }
        }
        assert_eq!(seen.len(), 7);
        assert_eq!(seen[0], "p00");
        assert_eq!(seen[6], "p06");
    }

    #[test]
    fn watch_from_a_compacted_version_is_gone() {
        let store = store_with_pods(2);
        let rv = store.current_rv();
        store.compact();
        let _ = store.create(
            &PODS,
            "default",
            json!({"metadata": {"name": "late"}, "spec": {"containers": [{"name": "c", "image": "i"}]}}),
        );
        assert!(store.watch_from(&PODS, Some(rv)).is_ok());
        assert_eq!(
            store
                .watch_from(&PODS, Some(rv - 1))
                .map(|_| ())
                .map_err(|e| e.code),
            Err(410)
        );
        let backlog = store
            .watch_from(&PODS, Some(rv))
            .map(|w| w.backlog.len())
            .ok();
        assert_eq!(backlog, Some(1));
    }
}
