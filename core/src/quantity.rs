//! Kubernetes resource quantities (`500m`, `2`, `4Gi`, `1.5G`, `1e3`) as integer milli-units, so
//! CPU, memory and GPU sums compare exactly: the one parser of the workspace (kubesim's scheduler
//! and the reconciler's capacity view both read quantities through it).

/// A quantity in thousandths of its base unit (millicores for CPU, millibytes for memory).
pub type Milli = i128;

/// Parses a quantity string into milli-units; `None` when it is not a valid quantity.
pub fn parse(s: &str) -> Option<Milli> {
    let s = s.trim();
    if s.is_empty() {
        return None;
    }
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(split);
    let (mantissa, scale) = decimal(number)?;
    // value = mantissa / 10^scale * multiplier; we want value * 1000.
    let (num, den): (i128, i128) = match suffix {
        "" => (1, 1),
        "n" => (1, 1_000_000_000),
        "u" => (1, 1_000_000),
        "m" => (1, 1000),
        "k" => (1000, 1),
        "M" => (1_000_000, 1),
        "G" => (1_000_000_000, 1),
        "T" => (1_000_000_000_000, 1),
        "P" => (1_000_000_000_000_000, 1),
        "E" => (1_000_000_000_000_000_000, 1),
        "Ki" => (1 << 10, 1),
        "Mi" => (1 << 20, 1),
        "Gi" => (1 << 30, 1),
        "Ti" => (1 << 40, 1),
        "Pi" => (1 << 50, 1),
        "Ei" => (1 << 60, 1),
        exp if exp.starts_with(['e', 'E']) => {
            let e: i32 = exp[1..].parse().ok()?;
            if !(-18..=18).contains(&e) {
                return None;
            }
            if e >= 0 {
                (10i128.pow(e as u32), 1)
            } else {
                (1, 10i128.pow((-e) as u32))
            }
        }
        _ => return None,
    };
    let value = mantissa.checked_mul(num)?.checked_mul(1000)?;
    let den = den.checked_mul(10i128.checked_pow(scale)?)?;
    // Round up like the API server does for sub-milli precision.
    Some((value + den - 1).div_euclid(den))
}

fn decimal(s: &str) -> Option<(i128, u32)> {
    let (neg, s) = match s.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let (int, frac) = s.split_once('.').unwrap_or((s, ""));
    if (int.is_empty() && frac.is_empty())
        || !int.bytes().chain(frac.bytes()).all(|b| b.is_ascii_digit())
        || frac.len() > 18
    {
        return None;
    }
    let digits = format!("{int}{frac}");
    let m: i128 = digits.parse().ok()?;
    Some((if neg { -m } else { m }, frac.len() as u32))
}

/// The canonical form the API server stores a quantity in (`1024Gi` → `1Ti`, `1000m` → `1`,
/// `2000` → `2k`, `0.5` → `500m`): binary suffixes stay binary and decimal ones decimal, with the
/// largest suffix that keeps the value whole. Exponent forms and values finer than a milli-unit
/// (or binary values that are not whole bytes) are returned unchanged.
pub fn canonical(s: &str) -> String {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(t.len());
    let suffix = &t[split..];
    let Some(milli) = parse(t) else {
        return s.to_owned();
    };
    if suffix.starts_with(['e', 'E']) || milli < 0 {
        return s.to_owned();
    }
    // The value must be exact at milli precision (parse rounds up).
    let Some((mantissa, scale)) = decimal(&t[..split]) else {
        return s.to_owned();
    };
    let binary = suffix.ends_with('i');
    if binary {
        if milli % 1000 != 0 {
            return s.to_owned();
        }
        let mut v = milli / 1000;
        if v == 0 {
            return "0".into();
        }
        let mut i = 0;
        let units = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];
        while i + 1 < units.len() && v % 1024 == 0 {
            v /= 1024;
            i += 1;
        }
        return format!("{v}{}", units[i]);
    }
    // Exactness check for decimal values: re-derive from mantissa and scale.
    let mult: i128 = match suffix {
        "n" => -9,
        "u" => -6,
        "m" => -3,
        "" => 0,
        "k" => 3,
        "M" => 6,
        "G" => 9,
        "T" => 12,
        "P" => 15,
        "E" => 18,
        _ => return s.to_owned(),
    };
    // value * 1000 = mantissa * 10^(mult + 3 - scale) must be whole.
    let exp = mult + 3 - i128::from(scale);
    if exp < 0 && mantissa % 10i128.pow(u32::try_from(-exp).unwrap_or(0)) != 0 {
        return s.to_owned();
    }
    if milli == 0 {
        return "0".into();
    }
    if milli % 1000 != 0 {
        return format!("{milli}m");
    }
    let mut v = milli / 1000;
    let mut i = 0;
    let units = ["", "k", "M", "G", "T", "P", "E"];
    while i + 1 < units.len() && v % 1000 == 0 {
        v /= 1000;
        i += 1;
    }
    format!("{v}{}", units[i])
}

/// Canonicalizes every string quantity of a resource map (`limits`, `capacity`, ...) in place.
pub fn canonicalize_map(map: Option<&mut serde_json::Value>) {
    if let Some(m) = map.and_then(serde_json::Value::as_object_mut) {
        for v in m.values_mut() {
            if let Some(q) = v.as_str() {
                *v = serde_json::Value::String(canonical(q));
            }
        }
    }
}

/// A quantity from a JSON value (string or number); 0 when absent or invalid.
pub fn from_json(v: Option<&serde_json::Value>) -> Milli {
    match v {
        Some(serde_json::Value::String(s)) => parse(s).unwrap_or(0),
        Some(serde_json::Value::Number(n)) => {
            n.as_f64().map_or(0, |f| (f * 1000.0).round() as i128)
        }
        _ => 0,
    }
}

/// A count of CPUs, GiB or GPUs for people: one decimal at most, no needless `.0` (`2`, `0.5`).
pub fn plain(v: f64) -> String {
    let mut s = String::new();
    write_plain(&mut s, v);
    s
}

/// Appends [`plain`]'s text of `v` to `out`, without a string of its own (a long queue's waiting
/// messages write tens of thousands of these).
pub fn write_plain(out: &mut String, v: f64) {
    use std::fmt::Write as _;
    // Whole numbers (GPU counts, most limits) are written as integers: the same text, without
    // the float formatting's exact rounding, which is slow.
    const EXACT: f64 = 9_007_199_254_740_992.0; // 2^53: every whole f64 below converts exactly
    if v.fract() == 0.0 && v.abs() < EXACT {
        let _ = write!(out, "{}", v as i64);
        return;
    }
    let start = out.len();
    let _ = write!(out, "{v:.1}");
    if out[start..].ends_with(".0") {
        out.truncate(out.len() - 2);
        if &out[start..] == "-0" {
            out.truncate(start);
            out.push('0');
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// What `plain` wrote before it had a path for whole numbers.
    fn plain_reference(v: f64) -> String {
        let s = format!("{v:.1}");
        match s.strip_suffix(".0") {
            Some("-0") => "0".to_owned(),
            Some(whole) => whole.to_owned(),
            None => s,
        }
    }

    #[test]
    fn plain_writes_what_it_always_wrote() {
        for v in [
            0.0,
            -0.0,
            0.04,
            -0.04,
            0.05,
            0.5,
            2.0,
            2.96,
            -3.0,
            64.0,
            1e15,
            9_007_199_254_740_991.0,
            9_007_199_254_740_992.0,
            1e20,
            -1e20,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
            f64::MAX,
            f64::MIN_POSITIVE,
        ] {
            assert_eq!(plain(v), plain_reference(v), "{v:?}");
        }
        let mut out = "x ".to_owned();
        write_plain(&mut out, -0.01);
        write_plain(&mut out, 8.0);
        assert_eq!(out, "x 08");
    }

    proptest! {
        #[test]
        fn plain_writes_any_number_as_before(v in any::<f64>(), n in any::<u32>(), h in -1e6f64..1e6) {
            prop_assert_eq!(plain(v), plain_reference(v));
            prop_assert_eq!(plain(f64::from(n)), plain_reference(f64::from(n)));
            prop_assert_eq!(plain(h), plain_reference(h));
            prop_assert_eq!(plain(h.round()), plain_reference(h.round()));
        }
    }

    #[test]
    fn quantities_parse_to_milli_units() {
        assert_eq!(parse("500m"), Some(500));
        assert_eq!(parse("2"), Some(2000));
        assert_eq!(parse("1.5"), Some(1500));
        assert_eq!(parse("1Gi"), Some(1000 * (1 << 30)));
        assert_eq!(parse("1G"), Some(1000 * 1_000_000_000));
        assert_eq!(parse("1e3"), Some(1_000_000));
        assert_eq!(parse("100Mi"), Some(1000 * 100 * (1 << 20)));
        assert_eq!(parse("x"), None);
        assert_eq!(parse("1Zi"), None);
        assert_eq!(from_json(Some(&serde_json::json!(8))), 8000);
    }

    #[test]
    fn quantities_take_the_api_servers_canonical_form() {
        for (given, stored) in [
            ("1024Gi", "1Ti"),
            ("65536Mi", "64Gi"),
            ("1536Mi", "1536Mi"),
            ("4Gi", "4Gi"),
            ("0.5Gi", "512Mi"),
            ("1000m", "1"),
            ("1500m", "1500m"),
            ("0.5", "500m"),
            ("2000", "2k"),
            ("96", "96"),
            ("0", "0"),
            ("1e3", "1e3"),
            ("x", "x"),
        ] {
            assert_eq!(canonical(given), stored, "{given}");
        }
    }
}
