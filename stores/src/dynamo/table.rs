//! Creates the job table with its keys, indexes and TTL (tests and the dev stack).
//!
//! Production defines the same table in `template.yaml`: keys `pk`/`sk` (S), GSI `active`
//! (`apk`/`ask`, S, projection ALL), GSI `tenant` (`tpk`/`tsk`, S, projection ALL), TTL on `ttl`,
//! on-demand billing. [`create_table`] is the reference for that definition.

use std::time::Duration;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, GlobalSecondaryIndex, KeySchemaElement, KeyType, Projection,
    ProjectionType, ScalarAttributeType, TableStatus, TimeToLiveSpecification,
};
use tuneplane_core::store::{Result, StoreError};

use super::{ACTIVE_INDEX, TENANT_INDEX};

fn err(
    op: &'static str,
    table: &str,
    e: impl std::error::Error + Send + Sync + 'static,
) -> StoreError {
    StoreError::backend(op, table, "", e)
}

fn key(table: &str, name: &str, kind: KeyType) -> Result<KeySchemaElement> {
    KeySchemaElement::builder()
        .attribute_name(name)
        .key_type(kind)
        .build()
        .map_err(|e| err("CreateTable", table, e))
}

fn index(table: &str, name: &str, hash: &str, range: &str) -> Result<GlobalSecondaryIndex> {
    GlobalSecondaryIndex::builder()
        .index_name(name)
        .key_schema(key(table, hash, KeyType::Hash)?)
        .key_schema(key(table, range, KeyType::Range)?)
        .projection(
            Projection::builder()
                .projection_type(ProjectionType::All)
                .build(),
        )
        .build()
        .map_err(|e| err("CreateTable", table, e))
}

/// Creates `table` if it does not exist, waits until it is active and enables TTL on `ttl`.
pub async fn create_table(client: &Client, table: &str) -> Result<()> {
    let mut request = client
        .create_table()
        .table_name(table)
        .billing_mode(BillingMode::PayPerRequest)
        .key_schema(key(table, "pk", KeyType::Hash)?)
        .key_schema(key(table, "sk", KeyType::Range)?)
        .global_secondary_indexes(index(table, ACTIVE_INDEX, "apk", "ask")?)
        .global_secondary_indexes(index(table, TENANT_INDEX, "tpk", "tsk")?);
    for name in ["pk", "sk", "apk", "ask", "tpk", "tsk"] {
        let def = AttributeDefinition::builder()
            .attribute_name(name)
            .attribute_type(ScalarAttributeType::S)
            .build()
            .map_err(|e| err("CreateTable", table, e))?;
        request = request.attribute_definitions(def);
    }
    match request.send().await {
        Ok(_) => {}
        Err(e)
            if e.as_service_error()
                .is_some_and(|se| se.is_resource_in_use_exception()) => {}
        Err(e) => return Err(err("CreateTable", table, e)),
    }
    wait_active(client, table).await?;
    let ttl = TimeToLiveSpecification::builder()
        .attribute_name("ttl")
        .enabled(true)
        .build()
        .map_err(|e| err("UpdateTimeToLive", table, e))?;
    match client
        .update_time_to_live()
        .table_name(table)
        .time_to_live_specification(ttl)
        .send()
        .await
    {
        Ok(_) => Ok(()),
        // Enabling TTL twice is refused with a validation error; the table is still correct.
        Err(e) if e.raw_response().is_some_and(|r| r.status().as_u16() == 400) => Ok(()),
        Err(e) => Err(err("UpdateTimeToLive", table, e)),
    }
}

async fn wait_active(client: &Client, table: &str) -> Result<()> {
    for _ in 0..120 {
        let out = client
            .describe_table()
            .table_name(table)
            .send()
            .await
            .map_err(|e| err("DescribeTable", table, e))?;
        if out.table.and_then(|t| t.table_status) == Some(TableStatus::Active) {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Err(err(
        "DescribeTable",
        table,
        std::io::Error::other("table did not become ACTIVE within 60 s"),
    ))
}
