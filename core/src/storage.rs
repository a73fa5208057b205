//! Storage limits of what jobs upload (docs/design.md §4, "Outputs and checkpoints"): every upload
//! a grant presigns names its size, and its URL is signed for exactly that size
//! ([`crate::store::BlobStore::presign_upload`]); a size above the per-object limit is refused, and
//! so is a request that would take its tenant's stored outputs and checkpoints past the tenant's
//! storage quota.
//!
//! What a tenant stores is measured, not kept in a ledger: [`tenant_use`] lists its two folders
//! (`outputs/<tenant>/` and `checkpoints/<tenant>/`, [`crate::grant::tenant_prefixes`]) once per
//! presign request, reading at most [`MAX_COUNTED_OBJECTS`] objects (on S3 at most one
//! `ListObjectsV2` per thousand). A tenant holding more objects than that is refused as over its
//! quota: the rest could not be counted, and counting only a part would let many small objects
//! hide large ones. The check is a bound, not a lock: requests presigned at the same moment are
//! each checked against what is stored, so a tenant may pass its quota by what such URLs carry
//! (each at most the per-object limit, [`crate::store::PresignedRequest`]s live 15 minutes).

use crate::store::{BlobStore, Result as StoreResult};

/// Default largest object one upload may write: 100 GiB (a large model's checkpoint shard).
pub const DEFAULT_OBJECT_MAX_BYTES: u64 = 100 << 30;
/// Default storage quota of a tenant's outputs and checkpoints: 10 TiB.
pub const DEFAULT_TENANT_STORAGE_BYTES: u64 = 10 << 40;
/// Most objects [`tenant_use`] reads over a tenant's two folders.
pub const MAX_COUNTED_OBJECTS: usize = 100_000;

/// The limits the presign route applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StorageLimits {
    /// Largest size one upload may name, bytes.
    pub object_max_bytes: u64,
    /// Most bytes a tenant's outputs and checkpoints may hold together; `None`: no quota.
    pub tenant_bytes: Option<u64>,
}

impl Default for StorageLimits {
    fn default() -> Self {
        StorageLimits {
            object_max_bytes: DEFAULT_OBJECT_MAX_BYTES,
            tenant_bytes: Some(DEFAULT_TENANT_STORAGE_BYTES),
        }
    }
}

/// What a tenant stores, as measured by [`tenant_use`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TenantUse {
    /// Bytes of the objects counted.
    pub bytes: u64,
    /// Objects counted.
    pub objects: usize,
    /// False when there were more than [`MAX_COUNTED_OBJECTS`] and the rest went uncounted.
    pub complete: bool,
}

/// Why uploads are refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StorageRefusal {
    /// One upload names a size above the per-object limit.
    #[error(
        "paths[{index}].size: {} is above the limit of {} for one object; write the file in smaller parts",
        show_bytes(*size),
        show_bytes(*limit)
    )]
    ObjectTooLarge {
        /// Its position in the request's `paths`.
        index: usize,
        /// The size it named.
        size: u64,
        /// The per-object limit.
        limit: u64,
    },
    /// The tenant's stored bytes plus the request's would pass its quota.
    #[error(
        "tenant {tenant} stores {} in outputs and checkpoints and these uploads add {}, over its storage quota of {}; an operator removes old outputs or raises the quota",
        show_bytes(*used),
        show_bytes(*requested),
        show_bytes(*quota)
    )]
    QuotaExceeded {
        /// The tenant.
        tenant: String,
        /// Bytes it stores.
        used: u64,
        /// Bytes the request would add.
        requested: u64,
        /// Its quota.
        quota: u64,
    },
    /// The tenant holds more objects than one request counts, so its use is unknown.
    #[error(
        "tenant {tenant} stores more than {counted} objects in outputs and checkpoints (at least {}), more than its storage quota of {} can be checked against; an operator removes old outputs",
        show_bytes(*used),
        show_bytes(*quota)
    )]
    TooManyObjects {
        /// The tenant.
        tenant: String,
        /// Objects counted ([`MAX_COUNTED_OBJECTS`]).
        counted: usize,
        /// Bytes of those.
        used: u64,
        /// Its quota.
        quota: u64,
    },
}

/// Parses a size: a whole number of bytes or a Kubernetes quantity (`100Gi`, `10Ti`, `5G`),
/// above zero. The error says what to write.
pub fn parse_bytes(text: &str) -> Result<u64, String> {
    let milli = crate::quantity::parse(text)
        .ok_or_else(|| format!("{text:?} is not a size; write bytes or e.g. 100Gi, 10Ti"))?;
    if milli <= 0 || milli % 1000 != 0 {
        return Err(format!("{text:?} must be a whole number of bytes above 0"));
    }
    u64::try_from(milli / 1000).map_err(|_| format!("{text:?} is too large"))
}

/// `N unit (N bytes)` in binary units, e.g. `100 GiB (107374182400 bytes)`; small sizes as bytes.
pub fn show_bytes(n: u64) -> String {
    const UNITS: [(&str, u32); 4] = [("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)];
    for (unit, shift) in UNITS {
        if n >= 1 << shift {
            // Display only: the exact figure follows in bytes.
            let value = n as f64 / (1u64 << shift) as f64;
            return format!("{value:.1} {unit} ({n} bytes)").replace(".0 ", " ");
        }
    }
    format!("{n} bytes")
}

/// Checks the sizes one request names (`sizes[i]` of `paths[i]`) against `limits`, given what
/// the tenant stores (`used`, read only when there is a quota). Pure: the route measures, then
/// asks.
pub fn check_uploads(
    tenant: &str,
    sizes: &[u64],
    used: Option<TenantUse>,
    limits: &StorageLimits,
) -> Result<(), StorageRefusal> {
    if let Some((index, &size)) = sizes
        .iter()
        .enumerate()
        .find(|(_, s)| **s > limits.object_max_bytes)
    {
        return Err(StorageRefusal::ObjectTooLarge {
            index,
            size,
            limit: limits.object_max_bytes,
        });
    }
    let (Some(quota), Some(used)) = (limits.tenant_bytes, used) else {
        return Ok(());
    };
    if !used.complete {
        return Err(StorageRefusal::TooManyObjects {
            tenant: tenant.to_owned(),
            counted: used.objects,
            used: used.bytes,
            quota,
        });
    }
    let requested = sizes.iter().fold(0u64, |a, s| a.saturating_add(*s));
    if used.bytes.saturating_add(requested) > quota {
        return Err(StorageRefusal::QuotaExceeded {
            tenant: tenant.to_owned(),
            used: used.bytes,
            requested,
            quota,
        });
    }
    Ok(())
}

/// What `tenant` stores in outputs and checkpoints: one listing of each folder, at most
/// [`MAX_COUNTED_OBJECTS`] objects in all (see the module docs).
pub async fn tenant_use(blobs: &dyn BlobStore, tenant: &str) -> StoreResult<TenantUse> {
    let mut counted = TenantUse {
        bytes: 0,
        objects: 0,
        complete: true,
    };
    for prefix in crate::grant::tenant_prefixes(tenant) {
        // One more than may be counted: finding it says the count is incomplete.
        let room = MAX_COUNTED_OBJECTS - counted.objects + 1;
        let found = blobs.list(&prefix, room).await?;
        counted.objects += found.len();
        counted.bytes = found
            .iter()
            .fold(counted.bytes, |a, (_, size)| a.saturating_add(*size));
        if counted.objects > MAX_COUNTED_OBJECTS {
            counted.complete = false;
            break;
        }
    }
    Ok(counted)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn used(bytes: u64) -> Option<TenantUse> {
        Some(TenantUse {
            bytes,
            objects: 3,
            complete: true,
        })
    }

    #[test]
    fn sizes_parse_as_bytes_or_quantities_and_bad_ones_say_what_to_write() {
        assert_eq!(parse_bytes("100Gi"), Ok(100 << 30));
        assert_eq!(parse_bytes("10Ti"), Ok(10 << 40));
        assert_eq!(parse_bytes("1048576"), Ok(1 << 20));
        assert_eq!(parse_bytes("5G"), Ok(5_000_000_000));
        for bad in ["", "lots", "0", "-1Gi", "1.5", "100m"] {
            let err = parse_bytes(bad).expect_err(bad);
            assert!(
                err.contains("size") || err.contains("bytes"),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn sizes_show_in_binary_units_with_the_exact_bytes() {
        assert_eq!(show_bytes(100 << 30), "100 GiB (107374182400 bytes)");
        assert_eq!(show_bytes(10 << 40), "10 TiB (10995116277760 bytes)");
        assert_eq!(show_bytes(1536), "1.5 KiB (1536 bytes)");
        assert_eq!(show_bytes(12), "12 bytes");
    }

    #[test]
    fn an_upload_above_the_object_limit_is_refused_naming_its_field_and_the_limit() {
        let limits = StorageLimits {
            object_max_bytes: 1000,
            tenant_bytes: None,
        };
        assert_eq!(check_uploads("acme", &[10, 1000], None, &limits), Ok(()));
        let err = check_uploads("acme", &[10, 1001], None, &limits).unwrap_err();
        assert_eq!(
            err,
            StorageRefusal::ObjectTooLarge {
                index: 1,
                size: 1001,
                limit: 1000
            }
        );
        let text = err.to_string();
        assert!(
            text.starts_with("paths[1].size: 1001 bytes is above the limit of 1000 bytes"),
            "{text}"
        );
    }

    #[test]
    fn uploads_that_would_pass_the_tenants_quota_are_refused_with_its_use_and_quota() {
        let limits = StorageLimits {
            object_max_bytes: 1 << 30,
            tenant_bytes: Some(1000),
        };
        assert_eq!(
            check_uploads("acme", &[100, 100], used(800), &limits),
            Ok(())
        );
        let err = check_uploads("acme", &[100, 101], used(800), &limits).unwrap_err();
        assert_eq!(
            err,
            StorageRefusal::QuotaExceeded {
                tenant: "acme".into(),
                used: 800,
                requested: 201,
                quota: 1000
            }
        );
        assert!(
            err.to_string().contains("tenant acme stores 800 bytes"),
            "{err}"
        );
        // No quota: only the object limit holds.
        let off = StorageLimits {
            tenant_bytes: None,
            ..limits
        };
        assert_eq!(
            check_uploads("acme", &[1 << 30], used(u64::MAX), &off),
            Ok(())
        );
    }

    #[test]
    fn a_tenant_with_more_objects_than_can_be_counted_is_refused_not_waved_through() {
        let limits = StorageLimits::default();
        let many = TenantUse {
            bytes: 5,
            objects: MAX_COUNTED_OBJECTS + 1,
            complete: false,
        };
        let err = check_uploads("acme", &[1], Some(many), &limits).unwrap_err();
        assert!(
            matches!(err, StorageRefusal::TooManyObjects { .. }),
            "{err}"
        );
    }
}
