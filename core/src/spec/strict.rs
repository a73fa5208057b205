//! Spec documents parsed into a JSON tree that refuses a key written twice in one mapping.
//!
//! YAML and JSON parsers keep the last of two equal keys; in a spec that silently drops what the
//! user wrote first (two `labels:` maps, two `EPOCHS` in `env`). Here the second occurrence is an
//! error naming the key's path and both lines.

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

/// Marker that starts the message of a duplicate-key error (found again in the parser's text).
const DUPLICATE: &str = "duplicate key ";

/// A value at `path` (dotted, `[i]` for items) whose mappings must not repeat a key.
struct Strict<'a> {
    path: &'a str,
}

impl<'de> DeserializeSeed<'de> for Strict<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Strict<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a YAML or JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        loop {
            let path = format!("{}[{}]", self.path, items.len());
            match seq.next_element_seed(Strict { path: &path })? {
                Some(v) => items.push(v),
                None => return Ok(Value::Array(items)),
            }
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let path = if self.path.is_empty() {
                key.clone()
            } else {
                format!("{}.{key}", self.path)
            };
            if out.contains_key(&key) {
                return Err(de::Error::custom(format!("{DUPLICATE}{path:?}")));
            }
            let value = map.next_value_seed(Strict { path: &path })?;
            out.insert(key, value);
        }
        Ok(Value::Object(out))
    }
}

/// Parses YAML (`json` false) or JSON text; a repeated key is an error naming its path and the
/// lines of both occurrences.
pub fn parse_strict(text: &str, json: bool) -> Result<Value, String> {
    let root = Strict { path: "" };
    let (parsed, kind) = if json {
        let mut de = serde_json::Deserializer::from_str(text);
        let parsed = root.deserialize(&mut de).and_then(|v| de.end().map(|()| v));
        (parsed.map_err(|e| e.to_string()), "JSON")
    } else {
        let parsed = root.deserialize(yaml_serde::Deserializer::from_str(text));
        (parsed.map_err(|e| e.to_string()), "YAML")
    };
    parsed.map_err(|message| match duplicate_path(&message) {
        Some(path) => duplicate_message(text, &path),
        None => format!("spec is not valid {kind}: {message}"),
    })
}

/// The key path of a duplicate-key error message.
fn duplicate_path(message: &str) -> Option<String> {
    let rest = &message[message.find(DUPLICATE)? + DUPLICATE.len()..];
    let quoted = rest.strip_prefix('"')?;
    let end = quoted.find('"')?;
    Some(quoted[..end].to_owned())
}

/// "`path` is written twice (lines A and B) ...": the two lines are found in `text` as the first
/// pair of lines that start with the key at the same column with no line between them that leaves
/// that block (the parsers do not say where the first occurrence was).
fn duplicate_message(text: &str, path: &str) -> String {
    let key = path.rsplit('.').next().unwrap_or(path);
    let key = key.split('[').next().unwrap_or(key);
    // (1-based line, column of the key) of every line that starts with it.
    let column_of_key = |l: &str| -> Option<usize> {
        let mut col = l.len() - l.trim_start().len();
        let mut rest = l.trim_start();
        while let Some(r) = rest.strip_prefix("- ").or_else(|| rest.strip_prefix('{')) {
            col += rest.len() - r.len();
            rest = r.trim_start();
            col += r.len() - rest.len();
        }
        [
            format!("{key}:"),
            format!("\"{key}\":"),
            format!("'{key}':"),
        ]
        .iter()
        .any(|p| rest.starts_with(p.as_str()))
        .then_some(col)
    };
    let lines: Vec<&str> = text.lines().collect();
    let indent = |l: &str| l.len() - l.trim_start().len();
    let candidates: Vec<(usize, usize)> = lines
        .iter()
        .enumerate()
        .filter_map(|(i, l)| column_of_key(l).map(|c| (i, c)))
        .collect();
    let same_block = |a: usize, b: usize, col: usize| {
        lines[a + 1..b].iter().all(|l| {
            let t = l.trim_start();
            t.is_empty()
                || t.starts_with('#')
                || indent(l) > col
                || (indent(l) == col && !t.starts_with("- "))
        })
    };
    let pair = candidates.iter().enumerate().find_map(|(n, &(a, col))| {
        candidates[n + 1..]
            .iter()
            .find(|&&(b, c)| c == col && same_block(a, b, col))
            .map(|&(b, _)| (a + 1, b + 1))
    });
    let place = match pair {
        Some((a, b)) => format!(" (lines {a} and {b})"),
        None => String::new(),
    };
    format!(
        "{path} is written twice{place}; a key may appear once in a mapping, so merge the two (nothing of either was used)"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repeated_key_names_the_path_and_both_lines() {
        let yaml = "name: a\nlabels: {team: x}\nimage: i\nlabels:\n  owner: y\n";
        let e = parse_strict(yaml, false).unwrap_err();
        assert!(
            e.starts_with("labels is written twice (lines 2 and 4)"),
            "{e}"
        );
        let nested = "name: a\nenv:\n  EPOCHS: '1'\n  LR: '0.1'\n  EPOCHS: '2'\n";
        let e = parse_strict(nested, false).unwrap_err();
        assert!(
            e.starts_with("env.EPOCHS is written twice (lines 3 and 5)"),
            "{e}"
        );
        let in_list = "pools:\n  - name: a\n    nodes: 1\n    nodes: 2\n";
        let e = parse_strict(in_list, false).unwrap_err();
        assert!(
            e.starts_with("pools[0].nodes is written twice (lines 3 and 4)"),
            "{e}"
        );
        let json = "{\"name\": \"a\",\n \"name\": \"b\"}";
        let e = parse_strict(json, true).unwrap_err();
        assert!(
            e.starts_with("name is written twice (lines 1 and 2)"),
            "{e}"
        );
    }

    #[test]
    fn distinct_keys_and_values_parse_as_before() {
        let yaml = "name: a\nn: 3\nf: 1.5\nok: true\nnone: ~\nlist: [1, x]\nm: {k: v}\n";
        let v = parse_strict(yaml, false).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"name": "a", "n": 3, "f": 1.5, "ok": true, "none": null,
                "list": [1, "x"], "m": {"k": "v"}})
        );
        // The same key in two different mappings is fine.
        assert!(parse_strict("a: {k: 1}\nb: {k: 2}\n", false).is_ok());
        let e = parse_strict("name: [\n", false).unwrap_err();
        assert!(e.starts_with("spec is not valid YAML"), "{e}");
    }
}
