//! The storage contract: one suite of behaviours every `JobStore` and `BlobStore` must show.
//!
//! Each test file builds its implementation and expands [`job_store_contract!`] or
//! [`blob_store_contract!`], which turn every case below into a `#[tokio::test]`. Every case gets a
//! fresh store (its own directory, table or bucket), so cases never see each other's data.

#![allow(dead_code, unused_macros, unused_imports)]

pub mod audit;
pub mod aws_env;
pub mod blobs;
pub mod callbacks;
pub mod fixtures;
pub mod jobs;
pub mod keys;
pub mod playgrounds;

/// Expands the job-store contract into tests; `$make` is an async fn returning
/// `(Arc<dyn JobStore>, guard)` where the guard keeps the store's resources alive.
macro_rules! job_store_contract {
    ($make:path) => {
        job_store_contract!(@cases $make;
            create_then_get_returns_version_one,
            same_idempotency_key_and_request_returns_the_first_job,
            same_idempotency_key_with_another_request_is_a_mismatch,
            concurrent_identical_submissions_create_one_job,
            expired_idempotency_key_can_be_used_again,
            creating_an_existing_job_id_fails,
            stale_writer_gets_a_conflict_not_an_overwrite,
            racing_writers_exactly_one_wins_per_version,
            terminal_jobs_are_final,
            active_index_is_in_admission_order_and_drops_terminal_jobs,
            queue_position_counts_queued_jobs_ahead_in_admission_order,
            tenant_listing_pages_newest_first_with_state_filter,
            events_list_in_time_order_and_repeats_are_stored_once,
            a_state_change_and_its_events_land_together_or_not_at_all,
            a_batch_of_updates_lands_except_the_one_that_conflicts,
            a_new_job_and_its_first_events_land_together_and_repeats_add_none,
            capacity_api_keys_schedules_and_playgrounds_round_trip,
            playground_pod_and_status_round_trip_and_updates_are_versioned,
            quotas_round_trip_list_by_tenant_and_delete,
            several_jobs_land_in_one_write_or_none_of_them,
            array_and_dependency_fields_round_trip,
        );
        job_store_contract!(@in keys; $make;
            api_keys_list_sorted_with_revoked_ones_and_old_records,
            revoking_a_key_keeps_its_first_time_and_ends_its_sessions,
            ending_sessions_keeps_the_key_valid_and_concurrent_changes_all_land,
            changing_a_missing_key_writes_nothing,
        );
        job_store_contract!(@in audit; $make;
            audit_entries_append_once_and_list_by_tenant_and_window_oldest_first,
            a_submissions_audit_entry_lands_with_its_job_and_never_on_a_repeat,
        );
        job_store_contract!(@in playgrounds; $make;
            concurrent_playground_creates_over_the_limit_leave_exactly_the_limit,
        );
        job_store_contract!(@in callbacks; $make;
            a_state_change_writes_its_outbox_entry_in_the_same_write_and_only_then,
            outbox_entries_change_and_go_only_at_their_revision,
            subscriptions_and_signing_secrets_are_kept_per_tenant,
        );
    };
    (@cases $make:path; $($case:ident),* $(,)?) => {
        job_store_contract!(@in jobs; $make; $($case),*);
    };
    (@in $module:ident; $make:path; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $case() {
                let (store, _guard) = $make().await;
                contract::$module::$case(store).await;
            }
        )*
    };
}

/// Expands the blob-store contract into tests; `$make` is an async fn returning
/// `(Arc<dyn BlobStore>, guard)`.
macro_rules! blob_store_contract {
    ($make:path) => {
        blob_store_contract!(@cases $make;
            put_if_absent_never_rewrites_an_object,
            missing_objects_read_as_absent,
            put_replaces_and_delete_removes,
            large_file_streams_in_and_out,
            put_file_replaces_an_object_from_a_file_large_or_small,
            a_bounded_download_refuses_an_object_above_its_limit,
            presigned_put_then_get_round_trips_over_plain_http,
            a_sized_upload_url_names_its_length_and_stores_a_body_of_it,
            keys_with_spaces_and_plus_round_trip,
            keys_that_escape_the_namespace_are_rejected,
            listing_a_folder_names_its_objects_sorted_and_bounded,
        );
    };
    (@cases $make:path; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $case() {
                let (store, _guard) = $make().await;
                contract::blobs::$case(store).await;
            }
        )*
    };
}

pub(crate) use {blob_store_contract, job_store_contract};
