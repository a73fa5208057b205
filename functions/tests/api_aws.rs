//! The API suite against DynamoDB and S3 on the local endpoint (moto_server on 127.0.0.1, started
//! by `scripts/with-moto.sh`).

mod common;

api_suite!(common::Harness::aws);
