//! Replies, read the same from RESP2 arrays and RESP3 maps, in one place.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::Value;

use crate::error::Error;
use crate::lease::Token;

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
/// module's README lists them), and a lease key's holders.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Info {
    /// `fixed`, `sliding`, `sliding-exact`, `token`, `leaky` or `lease`.
    pub algorithm: String,
    /// Every other integer field, by name. A lease key has `limit` (the
    /// latest acquisition's), `holders`, `remaining`, `updated_at` (Unix
    /// µs) and `reset_after` (ms until its last lease ends).
    pub fields: BTreeMap<String, i64>,
    /// A lease key's leases held now, earliest end first; empty for a
    /// rate limiter's key.
    pub leases: Vec<Holder>,
}

/// One lease a lease key holds, as [`THROTTLE.INFO`](crate::Throttle::info)
/// lists it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Holder {
    /// The lease's token.
    pub token: Token,
    /// When it ends unless released or renewed first.
    pub ends_at: SystemTime,
    /// Until then, rounded up to milliseconds, from the time INFO looked
    /// (the server's clock, or its `AT`).
    pub left: Duration,
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

fn bytes(value: &Value) -> Option<Vec<u8>> {
    match value {
        Value::BulkString(b) => Some(b.clone()),
        Value::SimpleString(s) => Some(s.clone().into_bytes()),
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

/// Reads `THROTTLE.INFO`'s reply: nil, or field-value pairs; a lease
/// key's `leases` an array of `[token, ends_at µs, ms left]`.
pub(crate) fn info(value: &Value) -> Result<Option<Info>, Error> {
    const COMMAND: &str = "THROTTLE.INFO";
    if *value == Value::Nil {
        return Ok(None);
    }
    let bad = || unexpected(COMMAND, value);
    let mut algorithm = None;
    let mut fields = BTreeMap::new();
    let mut leases = Vec::new();
    for (name, field) in pairs(value).ok_or_else(bad)? {
        let name = text(name).ok_or_else(bad)?;
        match (name.as_str(), field) {
            ("algorithm", _) => algorithm = Some(text(field).ok_or_else(bad)?),
            ("leases", _) => {
                let (Value::Array(items) | Value::Set(items)) = field else { return Err(bad()) };
                for item in items {
                    let Value::Array(parts) = item else { return Err(bad()) };
                    let [token, ends_at, left] = parts.as_slice() else { return Err(bad()) };
                    leases.push(Holder {
                        token: bytes(token).and_then(|b| Token::new(b).ok()).ok_or_else(bad)?,
                        ends_at: count(ends_at).map(|us| UNIX_EPOCH + Duration::from_micros(us)).ok_or_else(bad)?,
                        left: ms(left).ok_or_else(bad)?,
                    });
                }
            }
            _ => {
                fields.insert(name, int(field).ok_or_else(bad)?);
            }
        }
    }
    Ok(Some(Info { algorithm: algorithm.ok_or_else(bad)?, fields, leases }))
}

/// `THROTTLE.ACQUIRE`'s reply: the five fields and, exactly when admitted,
/// the lease's token.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Acquired {
    pub(crate) limit: u32,
    pub(crate) remaining: u32,
    pub(crate) retry_after: Duration,
    pub(crate) reset_after: Duration,
    pub(crate) token: Option<Token>,
}

/// Reads `THROTTLE.ACQUIRE`'s reply: RESP2 five integers and the token
/// when admitted; RESP3 a map with `token` when admitted.
pub(crate) fn acquire(value: &Value) -> Result<Acquired, Error> {
    const COMMAND: &str = "THROTTLE.ACQUIRE";
    let bad = || unexpected(COMMAND, value);
    let (five, token) = match value {
        Value::Array(items) => match items.as_slice() {
            [five @ .., token] if five.len() == 5 => (Value::Array(five.to_vec()), Some(token)),
            five => (Value::Array(five.to_vec()), None),
        },
        Value::Map(map) => {
            let (token, five): (Vec<_>, Vec<_>) = map.iter().partition(|(k, _)| text(k).as_deref() == Some("token"));
            let token = match token.as_slice() {
                [] => None,
                [(_, token)] => Some(token),
                _ => return Err(bad()),
            };
            (Value::Map(five.into_iter().cloned().collect()), token)
        }
        _ => return Err(bad()),
    };
    let d = decision(COMMAND, &five, false).map_err(|_| bad())?;
    let token = token.map(|t| bytes(t).and_then(|b| Token::new(b).ok()).ok_or_else(bad)).transpose()?;
    if token.is_some() != d.allowed {
        return Err(bad());
    }
    Ok(Acquired {
        limit: u32::try_from(d.limit).map_err(|_| bad())?,
        remaining: u32::try_from(d.remaining).map_err(|_| bad())?,
        retry_after: d.retry_after.ok_or_else(bad)?,
        reset_after: d.reset_after,
        token,
    })
}

/// Reads `THROTTLE.RELEASE`'s and `THROTTLE.RENEW`'s reply: 1 when the
/// token held a lease, 0 when it did not.
pub(crate) fn held(command: &'static str, value: &Value) -> Result<bool, Error> {
    match value {
        Value::Int(0) => Ok(false),
        Value::Int(1) => Ok(true),
        _ => Err(unexpected(command, value)),
    }
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

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn acquire_from_both_protocols() {
        let token = Some(Token::new("me").unwrap());
        let admitted = Acquired {
            limit: 3,
            remaining: 2,
            retry_after: Duration::ZERO,
            reset_after: Duration::from_secs(30),
            token: token.clone(),
        };
        let mut resp2 = vec![Value::Int(1), Value::Int(3), Value::Int(2), Value::Int(0), Value::Int(30_000)];
        resp2.push(bulk("me"));
        assert_eq!(acquire(&Value::Array(resp2)).unwrap(), admitted);
        let resp3 = map(&[
            ("allowed", Value::Boolean(true)),
            ("limit", Value::Int(3)),
            ("remaining", Value::Int(2)),
            ("retry_after", Value::Int(0)),
            ("reset_after", Value::Int(30_000)),
            ("token", bulk("me")),
        ]);
        assert_eq!(acquire(&resp3).unwrap(), admitted);
        let refused = Acquired {
            limit: 3,
            remaining: 0,
            retry_after: Duration::from_millis(8_000),
            reset_after: Duration::from_millis(9_000),
            token: None,
        };
        assert_eq!(acquire(&ints(&[0, 3, 0, 8_000, 9_000])).unwrap(), refused);
        let resp3 = map(&[
            ("allowed", Value::Boolean(false)),
            ("limit", Value::Int(3)),
            ("remaining", Value::Int(0)),
            ("retry_after", Value::Int(8_000)),
            ("reset_after", Value::Int(9_000)),
        ]);
        assert_eq!(acquire(&resp3).unwrap(), refused);
    }

    #[test]
    fn malformed_acquire_replies_are_errors() {
        let six = |allowed: i64, token: Value| {
            let mut v = vec![Value::Int(allowed), Value::Int(3), Value::Int(0), Value::Int(0), Value::Int(1)];
            v.push(token);
            Value::Array(v)
        };
        for value in [
            ints(&[1, 3, 2, 0, 30_000]),        // admitted without a token
            six(0, bulk("x")),                  // refused with one
            six(1, bulk("")),                   // an empty token
            six(1, bulk(&"x".repeat(65))),      // too long
            six(1, Value::Int(7)),              // not a string
            ints(&[0, 3, 0, -1, 9_000]),        // never: not a lease's answer
            ints(&[0, 3, 0, 8_000]),            // four fields
            ints(&[1, 3_000_000_000, 0, 0, 1]), // a limit beyond u32
            map(&[("allowed", Value::Boolean(true)), ("token", bulk("a")), ("token", bulk("b"))]),
            Value::Nil,
        ] {
            assert!(
                matches!(acquire(&value), Err(Error::UnexpectedReply { command: "THROTTLE.ACQUIRE", .. })),
                "{value:?}"
            );
        }
        assert!(held("R", &Value::Int(1)).unwrap());
        assert!(!held("R", &Value::Int(0)).unwrap());
        assert!(held("R", &Value::Int(2)).is_err());
        assert!(held("R", &Value::Nil).is_err());
    }

    #[test]
    fn info_lists_a_lease_keys_holders() {
        let lease = |token: &str, at: i64, left: i64| Value::Array(vec![bulk(token), Value::Int(at), Value::Int(left)]);
        let fields = |leases: Value| {
            vec![
                (bulk("algorithm"), bulk("lease")),
                (bulk("limit"), Value::Int(3)),
                (bulk("holders"), Value::Int(2)),
                (bulk("leases"), leases),
            ]
        };
        let held =
            Value::Array(vec![lease("a", 4_000_000_009_000_000, 9_000), lease("b", 4_000_000_035_000_000, 35_000)]);
        let resp2 = Value::Array(fields(held.clone()).into_iter().flat_map(|(k, v)| [k, v]).collect());
        let resp3 = Value::Map(fields(held));
        for v in [resp2, resp3] {
            let i = info(&v).unwrap().unwrap();
            assert_eq!((i.algorithm.as_str(), i.get("holders"), i.get("leases")), ("lease", Some(2), None));
            let at = |s: u64| UNIX_EPOCH + Duration::from_secs(s);
            let want = [("a", at(4_000_000_009), 9), ("b", at(4_000_000_035), 35)].map(|(t, ends_at, s)| Holder {
                token: Token::new(t).unwrap(),
                ends_at,
                left: Duration::from_secs(s),
            });
            assert_eq!(i.leases, want);
        }
        for bad in [Value::Array(vec![Value::Int(1)]), Value::Array(vec![lease("", 1, 1)]), Value::Int(3)] {
            assert!(info(&Value::Map(fields(bad.clone()))).is_err(), "{bad:?}");
        }
    }
}
