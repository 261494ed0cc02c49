//! Replies, read the same from RESP2 arrays and RESP3 maps, in one place.

use std::collections::BTreeMap;
use std::time::Duration;

use redis::Value;

use crate::error::Error;

/// The answer to one limit: the module's five fields, with times as
/// [`Duration`]s, and the extra fields when the call asked for them.
///
/// Being limited is a normal decision (`allowed` false), never an error.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Decision {
    /// True when the call was admitted.
    pub allowed: bool,
    /// The most units the key can admit at once: the limit (FIXED,
    /// SLIDING) or the burst (TOKEN, LEAKY).
    pub limit: u64,
    /// Units still admissible now, after this call.
    pub remaining: u64,
    /// How long to wait before acting: when limited, until the same call
    /// would be admitted if nothing else happened; when admitted, zero
    /// (LEAKY: the queue delay). `None` when it never can be (the cost is
    /// above the limit or burst; the module's -1).
    pub retry_after: Option<Duration>,
    /// Until the key is idle again (empty window, full token bucket, empty
    /// leaky bucket): the key's TTL; zero when it holds nothing.
    pub reset_after: Duration,
    /// `hits`, `banned`, `next_free`, when the call asked for
    /// [`detail`](crate::Options::detail).
    pub detail: Option<Detail>,
}

/// The extra fields of a decision ([`Options::detail`](crate::Options::detail)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Detail {
    /// Units the key counts now, refused (`TALLY`) and forced ones
    /// included; in a ban, those it counted when the ban started and since.
    pub hits: u64,
    /// What is left of the key's ban; `None` when it is not banned.
    pub banned: Option<Duration>,
    /// Until one more unit is admissible (`remaining` grows); zero when
    /// nothing is used.
    pub next_free: Duration,
}

/// The answer to [`THROTTLE.ALL`](crate::Throttle::all): admitted only if
/// every limit admits (then all consumed), else none changed.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct AllDecision {
    /// True when every limit admitted the call.
    pub allowed: bool,
    /// One decision per spec, in order. When the call is refused, a limit
    /// that would have admitted shows its state as it stands (nothing
    /// consumed).
    pub limits: Vec<Decision>,
}

impl AllDecision {
    /// How long to wait before the call can succeed: zero when admitted;
    /// else the longest `retry_after` of the limits that refuse; `None`
    /// when one of them never can.
    pub fn retry_after(&self) -> Option<Duration> {
        if self.allowed {
            return Some(Duration::ZERO);
        }
        self.limits
            .iter()
            .filter(|d| !d.allowed)
            .try_fold(Duration::ZERO, |longest, d| Some(longest.max(d.retry_after?)))
    }
}

/// What [`THROTTLE.INFO`](crate::Throttle::info) tells about a key: its
/// algorithm and the integer fields its state keeps (which vary with the
/// algorithm: `used` or `remaining`, `reset_after`, `banned`, ...; the
/// module's README lists them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Info {
    /// `fixed`, `sliding`, `sliding-exact`, `token` or `leaky`.
    pub algorithm: String,
    /// Every other field, by name.
    pub fields: BTreeMap<String, i64>,
}

impl Info {
    /// The field `name`, if the state has it.
    pub fn get(&self, name: &str) -> Option<i64> {
        self.fields.get(name).copied()
    }
}

fn unexpected(command: &'static str, value: &Value) -> Error {
    Error::UnexpectedReply { command, reply: format!("{value:?}") }
}

fn text(value: &Value) -> Option<String> {
    match value {
        Value::SimpleString(s) => Some(s.clone()),
        Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
        Value::VerbatimString { text, .. } => Some(text.clone()),
        _ => None,
    }
}

/// Field-value pairs: a RESP3 map, or a RESP2 array of alternating items.
fn pairs(value: &Value) -> Option<Vec<(&Value, &Value)>> {
    match value {
        Value::Map(pairs) => Some(pairs.iter().map(|(k, v)| (k, v)).collect()),
        Value::Array(items) if items.len() % 2 == 0 => Some(items.chunks_exact(2).map(|p| (&p[0], &p[1])).collect()),
        _ => None,
    }
}

fn flag(value: &Value) -> Option<bool> {
    match value {
        Value::Boolean(b) => Some(*b),
        Value::Int(0) => Some(false),
        Value::Int(1) => Some(true),
        _ => None,
    }
}

fn int(value: &Value) -> Option<i64> {
    match value {
        Value::Int(i) => Some(*i),
        _ => None,
    }
}

fn count(value: &Value) -> Option<u64> {
    int(value).and_then(|i| u64::try_from(i).ok())
}

fn ms(value: &Value) -> Option<Duration> {
    count(value).map(Duration::from_millis)
}

/// The eight fields by position (RESP2: five, or eight with DETAIL).
const FIELDS: [&str; 8] =
    ["allowed", "limit", "remaining", "retry_after", "reset_after", "hits", "banned", "next_free"];

/// Reads one decision: a RESP2 array of five (or, with `detail`, eight)
/// integers, or a RESP3 map with those names.
pub(crate) fn decision(command: &'static str, value: &Value, detail: bool) -> Result<Decision, Error> {
    let bad = || unexpected(command, value);
    let wanted = if detail { 8 } else { 5 };
    let fields: Vec<&Value> = match value {
        Value::Array(items) if items.len() == wanted => items.iter().collect(),
        Value::Map(map) => {
            let by_name: BTreeMap<String, &Value> = map.iter().filter_map(|(k, v)| Some((text(k)?, v))).collect();
            FIELDS[..wanted].iter().map(|name| by_name.get(*name).copied()).collect::<Option<_>>().ok_or_else(bad)?
        }
        _ => return Err(bad()),
    };
    let [allowed, limit, remaining, retry_after, reset_after, rest @ ..] = fields.as_slice() else {
        return Err(bad());
    };
    let retry_after = match int(retry_after).ok_or_else(bad)? {
        -1 => None,
        ms => Some(Duration::from_millis(u64::try_from(ms).map_err(|_| bad())?)),
    };
    let detail = match rest {
        [] => None,
        [hits, banned, next_free] => Some(Detail {
            hits: count(hits).ok_or_else(bad)?,
            banned: ms(banned).ok_or_else(bad).map(|d| (!d.is_zero()).then_some(d))?,
            next_free: ms(next_free).ok_or_else(bad)?,
        }),
        _ => return Err(bad()),
    };
    Ok(Decision {
        allowed: flag(allowed).ok_or_else(bad)?,
        limit: count(limit).ok_or_else(bad)?,
        remaining: count(remaining).ok_or_else(bad)?,
        retry_after,
        reset_after: ms(reset_after).ok_or_else(bad)?,
        detail,
    })
}

/// Reads `THROTTLE.ALL`'s reply: `allowed`, then one decision per spec.
pub(crate) fn all(value: &Value, specs: usize, detail: bool) -> Result<AllDecision, Error> {
    const COMMAND: &str = "THROTTLE.ALL";
    let Value::Array(items) = value else { return Err(unexpected(COMMAND, value)) };
    let Some((allowed, limits)) = items.split_first().filter(|(_, rest)| rest.len() == specs) else {
        return Err(unexpected(COMMAND, value));
    };
    Ok(AllDecision {
        allowed: flag(allowed).ok_or_else(|| unexpected(COMMAND, value))?,
        limits: limits.iter().map(|v| decision(COMMAND, v, detail)).collect::<Result<_, _>>()?,
    })
}

/// Reads `THROTTLE.INFO`'s reply: nil, or field-value pairs.
pub(crate) fn info(value: &Value) -> Result<Option<Info>, Error> {
    const COMMAND: &str = "THROTTLE.INFO";
    if *value == Value::Nil {
        return Ok(None);
    }
    let bad = || unexpected(COMMAND, value);
    let mut algorithm = None;
    let mut fields = BTreeMap::new();
    for (name, field) in pairs(value).ok_or_else(bad)? {
        let name = text(name).ok_or_else(bad)?;
        if name == "algorithm" {
            algorithm = Some(text(field).ok_or_else(bad)?);
        } else {
            fields.insert(name, int(field).ok_or_else(bad)?);
        }
    }
    Ok(Some(Info { algorithm: algorithm.ok_or_else(bad)?, fields }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ints(values: &[i64]) -> Value {
        Value::Array(values.iter().map(|&i| Value::Int(i)).collect())
    }

    fn map(fields: &[(&str, Value)]) -> Value {
        Value::Map(fields.iter().map(|(k, v)| (Value::SimpleString(k.to_string()), v.clone())).collect())
    }

    #[test]
    fn the_same_decision_from_both_protocols() {
        let want = Decision {
            allowed: false,
            limit: 3,
            remaining: 0,
            retry_after: Some(Duration::from_millis(59_000)),
            reset_after: Duration::from_millis(59_000),
            detail: Some(Detail { hits: 4, banned: None, next_free: Duration::from_millis(59_000) }),
        };
        let resp2 = ints(&[0, 3, 0, 59_000, 59_000, 4, 0, 59_000]);
        assert_eq!(decision("T", &resp2, true).unwrap(), want);
        // RESP3: a map, in any order, `allowed` a boolean.
        let resp3 = map(&[
            ("next_free", Value::Int(59_000)),
            ("allowed", Value::Boolean(false)),
            ("limit", Value::Int(3)),
            ("remaining", Value::Int(0)),
            ("retry_after", Value::Int(59_000)),
            ("reset_after", Value::Int(59_000)),
            ("hits", Value::Int(4)),
            ("banned", Value::Int(0)),
        ]);
        assert_eq!(decision("T", &resp3, true).unwrap(), want);
        let never = decision("T", &ints(&[0, 3, 3, -1, 0]), false).unwrap();
        assert_eq!((never.retry_after, never.detail), (None, None));
    }

    #[test]
    fn malformed_replies_are_errors() {
        for (value, detail) in [
            (ints(&[1, 3, 2, 0]), false),
            (ints(&[1, 3, 2, 0, 5]), true),
            (ints(&[2, 3, 2, 0, 5]), false),
            (ints(&[1, 3, -2, 0, 5]), false),
            (ints(&[1, 3, 2, -2, 5]), false),
            (map(&[("allowed", Value::Boolean(true))]), false),
            (Value::Nil, false),
        ] {
            assert!(
                matches!(decision("T", &value, detail), Err(Error::UnexpectedReply { command: "T", .. })),
                "{value:?}"
            );
        }
    }

    #[test]
    fn all_and_info() {
        let reply = Value::Array(vec![Value::Int(0), ints(&[1, 10, 9, 0, 1000]), ints(&[0, 5, 0, 700, 900])]);
        let all = all(&reply, 2, false).unwrap();
        assert!(!all.allowed);
        assert_eq!(all.retry_after(), Some(Duration::from_millis(700)));
        assert!(super::all(&reply, 3, false).is_err());
        let info2 = Value::Array(vec![
            Value::BulkString(b"algorithm".to_vec()),
            Value::BulkString(b"fixed".to_vec()),
            Value::BulkString(b"used".to_vec()),
            Value::Int(3),
        ]);
        let info3 = map(&[("algorithm", Value::SimpleString("fixed".into())), ("used", Value::Int(3))]);
        for v in [info2, info3] {
            let i = info(&v).unwrap().unwrap();
            assert_eq!((i.algorithm.as_str(), i.get("used"), i.get("nope")), ("fixed", Some(3), None));
        }
        assert_eq!(info(&Value::Nil).unwrap(), None);
    }
}
