//! The OpenAPI document (`openapi.yaml`) and the router agree: the document lists exactly the
//! router's routes, and every documented route is served (not the fallback, not 405).

// Test code: an unwrapped error is a failed test that names its line (as clippy.toml allows in
// #[test] functions; this covers the helpers too).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeSet;

use axum::http::{Method, StatusCode};
use common::Harness;
use serde_json::Value;
use tuneplane_functions::app::ROUTES;

fn documented() -> BTreeSet<(String, String)> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../openapi.yaml");
    let text = std::fs::read_to_string(path).expect("openapi.yaml");
    let doc: Value = yaml_serde::from_str(&text).expect("openapi.yaml");
    assert_eq!(
        doc["openapi"].as_str().map(|v| v.starts_with("3.")),
        Some(true)
    );
    let methods = ["get", "post", "put", "patch", "delete"];
    let mut out = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().into_iter().flatten() {
        for m in item.as_object().into_iter().flatten().map(|(k, _)| k) {
            if methods.contains(&m.as_str()) {
                out.insert((m.clone(), path.clone()));
            }
        }
    }
    out
}

#[test]
fn openapi_lists_exactly_the_router_routes() {
    let routes: BTreeSet<(String, String)> = ROUTES
        .iter()
        .map(|(m, p)| (m.to_string(), p.to_string()))
        .collect();
    let doc = documented();
    let missing: Vec<_> = routes.difference(&doc).collect();
    let extra: Vec<_> = doc.difference(&routes).collect();
    assert!(
        missing.is_empty(),
        "routes missing from openapi.yaml: {missing:?}"
    );
    assert!(
        extra.is_empty(),
        "openapi.yaml documents routes the router lacks: {extra:?}"
    );
}

#[tokio::test]
async fn every_documented_route_is_served_by_the_router() {
    let h = Harness::embedded().await;
    for (method, path) in documented() {
        let concrete = path.replace("{id}", "j-0000").replace("{source}", "ci");
        let method = Method::from_bytes(method.to_uppercase().as_bytes()).expect("an HTTP method");
        let reply = h
            .call(method.clone(), &concrete, None, &[], Vec::new())
            .await;
        assert_ne!(
            reply.status,
            StatusCode::METHOD_NOT_ALLOWED,
            "{method} {path}"
        );
        let message = reply.json["error"]["message"].as_str().unwrap_or_default();
        assert!(
            !message.starts_with("no route"),
            "{method} {path} fell through: {message}"
        );
    }
    // The fallback itself answers in the API's error format.
    let missing = h
        .call(Method::GET, "/v1/nothing-here", None, &[], Vec::new())
        .await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    assert!(
        missing.json["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .starts_with("no route")
    );
}
