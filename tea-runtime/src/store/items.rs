//! Long-term memory across threads: [`Memory`], a store of JSON objects ("items") under a key
//! in a namespace (a path of labels), which outlive the threads that write them — what an agent
//! remembers of a user from one conversation to the next. Nodes reach it through
//! [`Ctx::store`](crate::Ctx::store), YAML agents through `ltm.*` and `memory.*`, `tea serve`
//! through its `/store` routes: one store, not three.
//!
//! It is kept in any [`Checkpointer`] (so on every store, a user's own and a sealed one too)
//! under a graph name of its own ([`GRAPH`], the name `tea serve` has always kept its items
//! under), one store thread per item whose id is the JSON array of the namespace's labels and
//! the key, each write a compare-and-swap on the item's head. An item records its value, when
//! it was created and updated, when it expires, and its embedding when the memory has an
//! [`Embedder`]. Searches and namespace listings read the store's list of items and filter it
//! here (the `Checkpointer` trait has no query by prefix): fine for thousands of items, not
//! millions.

use crate::store::{AppendOutcome, Checkpointer};
use crate::vocab::clock::Clock;
use crate::vocab::error::{BoxError, Error, MemoryProblem};
use crate::vocab::name::ThreadId;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::cmp::Ordering;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// The graph name items are stored under (`tea serve`'s since before [`Memory`] existed).
pub const GRAPH: &str = "tea-serve#store";
/// Compare-and-swap attempts of a put before it gives up.
const ATTEMPTS: usize = 64;
/// A put prunes the item's older versions every this many writes.
const PRUNE_EVERY: u64 = 16;

/// Turns texts into vectors for [`Memory`]'s semantic search: an embedding model's client, or
/// any function `Fn(&str) -> Vec<f32>`.
///
/// ```
/// // A closure is an embedder: here, a toy one counting two letters.
/// let embed = |text: &str| vec![text.matches('a').count() as f32, text.matches('b').count() as f32];
/// let memory = tea::Memory::new(tea::MemoryStore::new()).embedder(embed);
/// assert!(memory.has_embedder());
/// ```
pub trait Embedder: Send + Sync + 'static {
    /// One vector per text, in order.
    ///
    /// # Errors
    /// The model's; a search or put that needed it fails with [`MemoryProblem::Embedder`].
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, BoxError>;
}

impl<F> Embedder for F
where
    F: Fn(&str) -> Vec<f32> + Send + Sync + 'static,
{
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, BoxError> {
        Ok(texts.iter().map(|text| self(text)).collect())
    }
}

/// An item of a [`Memory`]: a JSON object under a key in a namespace.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Item {
    /// Its namespace's labels (`["users", "ada"]`).
    pub namespace: Vec<String>,
    /// Its key in the namespace.
    pub key: String,
    /// Its value.
    pub value: Map<String, Value>,
    /// When it was first put, in milliseconds since the Unix epoch (by the memory's clock).
    pub created_at_ms: u64,
    /// When it was last put.
    pub updated_at_ms: u64,
    /// When it expires (`None`: never). An expired item reads as absent, and sweeps delete it.
    pub expires_at_ms: Option<u64>,
    /// Its similarity to a search's text (cosine, -1 to 1); `None` outside such a search.
    pub score: Option<f64>,
}

/// An item as stored: the JSON `tea serve` has always written, with what TTLs and embeddings
/// add only when they are used (so older records read, and older readers read these).
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Stored {
    namespace: Vec<String>,
    key: String,
    value: Map<String, Value>,
    created_at: u64,
    updated_at: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    expires_at: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    embedding: Option<Vec<f32>>,
}

impl Stored {
    fn expired(&self, now: u64) -> bool {
        self.expires_at.is_some_and(|at| at <= now)
    }

    fn item(self, score: Option<f64>) -> Item {
        Item {
            namespace: self.namespace,
            key: self.key,
            value: self.value,
            created_at_ms: self.created_at,
            updated_at_ms: self.updated_at,
            expires_at_ms: self.expires_at,
            score,
        }
    }
}

/// A search of a [`Memory`] ([`Memory::search`]): the items under a namespace prefix whose
/// values match a filter, the most recently updated first — or, given a text, the most similar
/// to it first (with an embedder). Ten at most unless told.
///
/// A filter names top-level fields of the value, each with the value it must equal, or with an
/// object of comparisons: `{"$eq": v}`, `{"$ne": v}`, `{"$gt": n}`, `{"$gte": n}`, `{"$lt": n}`,
/// `{"$lte": n}` (numbers compare as numbers, strings as strings).
///
/// ```
/// let query = tea::SearchQuery::under(&["users"]).filter("theme", "dark").limit(5);
/// # let _ = query;
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SearchQuery {
    prefix: Vec<String>,
    filter: Map<String, Value>,
    text: Option<String>,
    limit: usize,
    offset: usize,
}

impl SearchQuery {
    /// Every item under `prefix` (`&[]`: every item).
    pub fn under<S: AsRef<str>>(prefix: &[S]) -> Self {
        SearchQuery {
            prefix: prefix.iter().map(|s| s.as_ref().to_owned()).collect(),
            filter: Map::new(),
            text: None,
            limit: 10,
            offset: 0,
        }
    }

    /// Only items whose value's field `field` matches `condition` (a value it equals, or an
    /// object of comparisons, see [`SearchQuery`]).
    pub fn filter(mut self, field: impl Into<String>, condition: impl Into<Value>) -> Self {
        self.filter.insert(field.into(), condition.into());
        self
    }

    /// Every condition of `filter` (a JSON object, as `tea serve`'s `filter`).
    pub fn filters(mut self, filter: Map<String, Value>) -> Self {
        self.filter.extend(filter);
        self
    }

    /// The items most similar to `text` first, each with its [`Item::score`] (needs
    /// [`Memory::embedder`]; an empty text is no text).
    pub fn text(mut self, text: impl Into<String>) -> Self {
        let text = text.into();
        self.text = (!text.is_empty()).then_some(text);
        self
    }

    /// At most `limit` items (default 10).
    pub fn limit(mut self, limit: usize) -> Self {
        self.limit = limit;
        self
    }

    /// Skips the first `offset` items (for pages).
    pub fn offset(mut self, offset: usize) -> Self {
        self.offset = offset;
        self
    }
}

/// Long-term memory: JSON objects under keys in namespaces, kept in a [`Checkpointer`] and
/// shared by every thread, app and process on it. Cheap to clone (one reference count).
///
/// An app gets one with [`Builder::memory`](crate::Builder::memory), or by default on its own
/// checkpointer; its nodes read it with [`Ctx::store`](crate::Ctx::store).
///
/// ```
/// use serde_json::json;
///
/// let memory = tea::Memory::new(tea::MemoryStore::new());
/// memory.put(&["users", "ada"], "prefs", json!({ "theme": "dark" }))?;
/// let item = memory.get(&["users", "ada"], "prefs")?.expect("just put");
/// assert_eq!(item.value["theme"], "dark");
///
/// let found = memory.search(&tea::SearchQuery::under(&["users"]).filter("theme", "dark"))?;
/// assert_eq!(found[0].key, "prefs");
/// assert_eq!(memory.namespaces(&[] as &[&str], &[] as &[&str], None)?, [["users", "ada"]]);
/// assert!(memory.delete(&["users", "ada"], "prefs")?);
/// # Ok::<(), tea::Error>(())
/// ```
#[derive(Clone)]
pub struct Memory {
    inner: Arc<Inner>,
}

#[derive(Clone)]
struct Inner {
    store: Arc<dyn Checkpointer>,
    clock: Clock,
    embedder: Option<Arc<dyn Embedder>>,
    fields: Vec<String>,
    default_ttl: Option<Duration>,
}

impl fmt::Debug for Memory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Memory")
            .field("clock", &self.inner.clock)
            .field("embedder", &self.inner.embedder.is_some())
            .field("fields", &self.inner.fields)
            .field("default_ttl", &self.inner.default_ttl)
            .finish_non_exhaustive()
    }
}

impl Memory {
    /// A memory kept in `store`.
    pub fn new(store: impl Checkpointer) -> Self {
        Memory::on(Arc::new(store))
    }

    /// A memory kept in a store shared with something else (an app's checkpointer).
    pub fn on(store: Arc<dyn Checkpointer>) -> Self {
        Memory {
            inner: Arc::new(Inner {
                store,
                clock: Clock::system(),
                embedder: None,
                fields: Vec::new(),
                default_ttl: None,
            }),
        }
    }

    fn with(self, change: impl FnOnce(&mut Inner)) -> Self {
        let mut inner = Arc::unwrap_or_clone(self.inner);
        change(&mut inner);
        Memory { inner: Arc::new(inner) }
    }

    /// Reads the time from `clock` (items' times and expiries; default [`Clock::system`]): a
    /// [`Clock::manual`] one lets a test expire an item at once.
    pub fn clock(self, clock: Clock) -> Self {
        self.with(|inner| inner.clock = clock)
    }

    /// Embeds each item put from now on with `embedder`, and lets searches ask for the items
    /// most similar to a text ([`SearchQuery::text`]). Items put before have no embedding: a
    /// search embeds them as it meets them.
    pub fn embedder(self, embedder: impl Embedder) -> Self {
        self.with(|inner| inner.embedder = Some(Arc::new(embedder)))
    }

    /// Embeds only these top-level fields of a value (their texts joined by newlines; a field
    /// that is not a string as its JSON), rather than the whole value as JSON (the default).
    pub fn index_fields<S: AsRef<str>>(self, fields: &[S]) -> Self {
        let fields = fields.iter().map(|f| f.as_ref().to_owned()).collect();
        self.with(|inner| inner.fields = fields)
    }

    /// Items put without a time to live of their own ([`put`](Self::put)) expire `ttl` after
    /// each put (default: never).
    pub fn default_ttl(self, ttl: Duration) -> Self {
        self.with(|inner| inner.default_ttl = Some(ttl))
    }

    /// Whether searches may ask for similarity to a text ([`embedder`](Self::embedder)).
    pub fn has_embedder(&self) -> bool {
        self.inner.embedder.is_some()
    }

    /// The store the items are kept in.
    pub fn checkpointer(&self) -> &dyn Checkpointer {
        &*self.inner.store
    }

    /// Puts `value` (a JSON object) under `key` in `namespace`, replacing what was there (its
    /// creation time kept); it expires after the memory's [`default_ttl`](Self::default_ttl),
    /// if any.
    ///
    /// # Errors
    /// [`Error::Memory`] for a namespace or key that cannot be used, a value that is not an
    /// object, an embedder that fails; [`Error::Store`] when the store does.
    pub fn put<S: AsRef<str>>(&self, namespace: &[S], key: &str, value: Value) -> Result<(), Error> {
        self.put_with_ttl(namespace, key, value, self.inner.default_ttl)
    }

    /// [`put`](Self::put), expiring `ttl` after now (`None`: never).
    ///
    /// # Errors
    /// As [`put`](Self::put).
    pub fn put_with_ttl<S: AsRef<str>>(
        &self,
        namespace: &[S],
        key: &str,
        value: Value,
        ttl: Option<Duration>,
    ) -> Result<(), Error> {
        let namespace = labels(namespace);
        let id = item_id(&namespace, key)?;
        let value = match value {
            Value::Object(value) => value,
            other => {
                let mut found = other.to_string();
                cut(&mut found, 80);
                return Err(problem(&namespace, Some(key), MemoryProblem::NotAnObject { found }));
            }
        };
        let embedding = match &self.inner.embedder {
            Some(embedder) => Some(self.embed_one(&**embedder, &value, &namespace, Some(key))?),
            None => None,
        };
        let store = &*self.inner.store;
        for _ in 0..ATTEMPTS {
            let head = store.head(GRAPH, &id)?;
            let now = self.inner.clock.now_ms();
            let created_at = match &head {
                None => now,
                Some((_, bytes)) => match decode(bytes) {
                    Ok(current) if !current.expired(now) => current.created_at,
                    // An expired or damaged item is replaced as a new one.
                    _ => now,
                },
            };
            let stored = Stored {
                namespace: namespace.clone(),
                key: key.to_owned(),
                value: value.clone(),
                created_at,
                updated_at: now,
                expires_at: ttl.map(|ttl| now.saturating_add(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX))),
                embedding: embedding.clone(),
            };
            let bytes = serde_json::to_vec(&stored).map_err(Error::store)?;
            let expected = head.map(|(n, _)| n);
            let n = expected.map_or(1, |n| n + 1);
            match store.append(GRAPH, &id, expected, n, &bytes, true)? {
                AppendOutcome::Written => {
                    if n % PRUNE_EVERY == 0 {
                        store.prune(GRAPH, &id, 1)?;
                    }
                    return Ok(());
                }
                AppendOutcome::Conflict { .. } => continue,
            }
        }
        Err(problem(&namespace, Some(key), MemoryProblem::Busy { attempts: ATTEMPTS }))
    }

    /// The item under `key` in `namespace`, unless there is none or it has expired.
    ///
    /// # Errors
    /// [`Error::Memory`] for a namespace or key that cannot be used, or a damaged item;
    /// [`Error::Store`] when the store fails.
    pub fn get<S: AsRef<str>>(&self, namespace: &[S], key: &str) -> Result<Option<Item>, Error> {
        let namespace = labels(namespace);
        let id = item_id(&namespace, key)?;
        let now = self.inner.clock.now_ms();
        match self.inner.store.head(GRAPH, &id)? {
            None => Ok(None),
            Some((_, bytes)) => {
                let stored = decode(&bytes).map_err(|reason| damaged(&namespace, key, reason))?;
                Ok((!stored.expired(now)).then(|| stored.item(None)))
            }
        }
    }

    /// Deletes the item under `key` in `namespace`: `Ok(false)` when there was none (or it had
    /// expired).
    ///
    /// # Errors
    /// [`Error::Memory`] for a namespace or key that cannot be used; [`Error::Store`] when the
    /// store fails.
    pub fn delete<S: AsRef<str>>(&self, namespace: &[S], key: &str) -> Result<bool, Error> {
        let namespace = labels(namespace);
        let id = item_id(&namespace, key)?;
        let now = self.inner.clock.now_ms();
        let live = match self.inner.store.head(GRAPH, &id)? {
            None => return Ok(false),
            Some((_, bytes)) => decode(&bytes).map_or(true, |stored| !stored.expired(now)),
        };
        Ok(self.inner.store.delete(GRAPH, &id)? && live)
    }

    /// The items `query` finds, in its order, cut to its page.
    ///
    /// # Errors
    /// [`Error::Memory`] for a prefix label that cannot be used, a text to search without an
    /// embedder, an embedder that fails; [`Error::Store`] when the store fails. Damaged items
    /// are skipped.
    pub fn search(&self, query: &SearchQuery) -> Result<Vec<Item>, Error> {
        check_labels(&query.prefix, false, None)?;
        let wanted = match &query.text {
            None => None,
            Some(text) => {
                let Some(embedder) = &self.inner.embedder else {
                    return Err(problem(&query.prefix, None, MemoryProblem::NoEmbedder));
                };
                Some(self.embed_texts(&**embedder, &[text], &query.prefix, None)?.remove(0))
            }
        };
        let now = self.inner.clock.now_ms();
        let mut found: Vec<Stored> = Vec::new();
        for (id, namespace, _) in self.listed()? {
            if !namespace.starts_with(&query.prefix) {
                continue;
            }
            // An item deleted since the listing is skipped, as one that has expired or is damaged.
            let Some((_, bytes)) = self.inner.store.head(GRAPH, &id)? else { continue };
            let Ok(stored) = decode(&bytes) else { continue };
            if !stored.expired(now) && filter_matches(&query.filter, &stored.value) {
                found.push(stored);
            }
        }
        let by_time = |a: &Stored, b: &Stored| {
            b.updated_at.cmp(&a.updated_at).then_with(|| (&a.namespace, &a.key).cmp(&(&b.namespace, &b.key)))
        };
        let Some(wanted) = wanted else {
            found.sort_by(by_time);
            return Ok(found.into_iter().skip(query.offset).take(query.limit).map(|s| s.item(None)).collect());
        };
        // Items put before the embedder was set are embedded now, all in one call.
        let missing: Vec<usize> = (0..found.len()).filter(|i| found[*i].embedding.is_none()).collect();
        if !missing.is_empty() {
            let Some(embedder) = &self.inner.embedder else {
                return Err(problem(&query.prefix, None, MemoryProblem::NoEmbedder));
            };
            let texts: Vec<String> = missing.iter().map(|i| self.indexed_text(&found[*i].value)).collect();
            let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
            let vectors = self.embed_texts(&**embedder, &texts, &query.prefix, None)?;
            for (i, vector) in missing.into_iter().zip(vectors) {
                found[i].embedding = Some(vector);
            }
        }
        let mut scored: Vec<(f64, Stored)> =
            found.into_iter().map(|s| (s.embedding.as_deref().map_or(0.0, |e| cosine(&wanted, e)), s)).collect();
        scored.sort_by(|(x, a), (y, b)| y.partial_cmp(x).unwrap_or(Ordering::Equal).then_with(|| by_time(a, b)));
        Ok(scored.into_iter().skip(query.offset).take(query.limit).map(|(score, s)| s.item(Some(score))).collect())
    }

    /// The namespaces that hold items (not expired), sorted and without repeats: those that
    /// start with `prefix` and end with `suffix`, each cut to its first `max_depth` labels.
    ///
    /// # Errors
    /// [`Error::Memory`] for a label that cannot be used; [`Error::Store`] when the store fails.
    pub fn namespaces<P: AsRef<str>, Q: AsRef<str>>(
        &self,
        prefix: &[P],
        suffix: &[Q],
        max_depth: Option<usize>,
    ) -> Result<Vec<Vec<String>>, Error> {
        let prefix = labels(prefix);
        let suffix = labels(suffix);
        check_labels(&prefix, false, None)?;
        check_labels(&suffix, false, None)?;
        let now = self.inner.clock.now_ms();
        let mut found = std::collections::BTreeSet::new();
        for (id, mut namespace, _) in self.listed()? {
            if !(namespace.starts_with(&prefix) && namespace.ends_with(&suffix)) {
                continue;
            }
            let Some((_, bytes)) = self.inner.store.head(GRAPH, &id)? else { continue };
            if decode(&bytes).is_ok_and(|stored| stored.expired(now)) {
                continue;
            }
            namespace.truncate(max_depth.unwrap_or(usize::MAX));
            found.insert(namespace);
        }
        Ok(found.into_iter().collect())
    }

    /// Deletes every item that has expired, each only if no put renewed it meanwhile; how many.
    /// ([`App::sweep`](crate::App::sweep) calls it for its app's memory.)
    ///
    /// # Errors
    /// [`Error::Store`] when the store fails. Damaged items are kept.
    pub fn sweep(&self) -> Result<usize, Error> {
        let now = self.inner.clock.now_ms();
        let mut deleted = 0;
        for (id, _, _) in self.listed()? {
            let Some((head, bytes)) = self.inner.store.head(GRAPH, &id)? else { continue };
            if decode(&bytes).is_ok_and(|stored| stored.expired(now)) && self.inner.store.delete_at(GRAPH, &id, head)? {
                deleted += 1;
            }
        }
        Ok(deleted)
    }

    /// The store threads of every item, with their namespaces and keys.
    fn listed(&self) -> Result<Vec<(ThreadId, Vec<String>, String)>, Error> {
        Ok(self
            .inner
            .store
            .threads(GRAPH)?
            .into_iter()
            .filter_map(|id| decode_id(&id).map(|(ns, key)| (id, ns, key)))
            .collect())
    }

    /// The text of `value` that is embedded.
    fn indexed_text(&self, value: &Map<String, Value>) -> String {
        if self.inner.fields.is_empty() {
            return Value::Object(value.clone()).to_string();
        }
        let parts: Vec<String> = self
            .inner
            .fields
            .iter()
            .filter_map(|field| value.get(field))
            .map(|v| match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            })
            .collect();
        parts.join("\n")
    }

    fn embed_one(
        &self,
        embedder: &dyn Embedder,
        value: &Map<String, Value>,
        namespace: &[String],
        key: Option<&str>,
    ) -> Result<Vec<f32>, Error> {
        let text = self.indexed_text(value);
        Ok(self.embed_texts(embedder, &[&text], namespace, key)?.remove(0))
    }

    fn embed_texts(
        &self,
        embedder: &dyn Embedder,
        texts: &[&str],
        namespace: &[String],
        key: Option<&str>,
    ) -> Result<Vec<Vec<f32>>, Error> {
        // The embedder is user code: a panic in it is its error, not the process's.
        let vectors = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| embedder.embed(texts)))
            .unwrap_or_else(|payload| Err(crate::vocab::error::panic_message(payload).into()))
            .map_err(|source| problem(namespace, key, MemoryProblem::Embedder { source }))?;
        if vectors.len() != texts.len() {
            let source = format!("it gave {} vectors for {} texts", vectors.len(), texts.len()).into();
            return Err(problem(namespace, key, MemoryProblem::Embedder { source }));
        }
        Ok(vectors)
    }
}

/// The labels of `namespace`, owned.
fn labels<S: AsRef<str>>(namespace: &[S]) -> Vec<String> {
    namespace.iter().map(|s| s.as_ref().to_owned()).collect()
}

fn problem(namespace: &[String], key: Option<&str>, problem: MemoryProblem) -> Error {
    Error::Memory { namespace: namespace.to_vec(), key: key.map(str::to_owned), problem }
}

fn damaged(namespace: &[String], key: &str, reason: String) -> Error {
    problem(namespace, Some(key), MemoryProblem::Damaged { reason })
}

/// Cuts `text` to at most `max` bytes, on a character boundary, marking the cut.
fn cut(text: &mut String, max: usize) {
    if text.len() > max {
        let mut at = max;
        while !text.is_char_boundary(at) {
            at -= 1;
        }
        text.truncate(at);
        text.push('…');
    }
}

/// Checks a namespace's labels: each non-empty, without `.` (the separator of dotted
/// namespaces, `users.ada`) and without control characters; `required`: at least one.
fn check_labels(namespace: &[String], required: bool, key: Option<&str>) -> Result<(), Error> {
    if required && namespace.is_empty() {
        return Err(problem(namespace, key, MemoryProblem::BadNamespace { label: String::new() }));
    }
    for label in namespace {
        if label.is_empty() || label.contains('.') || label.chars().any(char::is_control) {
            return Err(problem(namespace, key, MemoryProblem::BadNamespace { label: label.clone() }));
        }
    }
    Ok(())
}

/// The store thread of the item `key` in `namespace`: the JSON array of both, so distinct
/// pairs never share an id.
fn item_id(namespace: &[String], key: &str) -> Result<ThreadId, Error> {
    check_labels(namespace, true, Some(key))?;
    if key.is_empty() || key.chars().any(char::is_control) {
        return Err(problem(namespace, Some(key), MemoryProblem::BadKey));
    }
    let mut path: Vec<&str> = namespace.iter().map(String::as_str).collect();
    path.push(key);
    let id = serde_json::to_string(&path).map_err(Error::store)?;
    if id.len() > ThreadId::MAX_LEN {
        return Err(problem(namespace, Some(key), MemoryProblem::TooLong { max: ThreadId::MAX_LEN }));
    }
    Ok(ThreadId::from(id))
}

/// The namespace and key of a store thread (`None` for an id this module did not write).
fn decode_id(id: &ThreadId) -> Option<(Vec<String>, String)> {
    let mut path: Vec<String> = serde_json::from_str(id.as_str()).ok()?;
    let key = path.pop()?;
    Some((path, key))
}

fn decode(bytes: &[u8]) -> Result<Stored, String> {
    serde_json::from_slice(bytes).map_err(|e| e.to_string())
}

/// Whether `value` meets every condition of `filter` (see [`SearchQuery`]).
fn filter_matches(filter: &Map<String, Value>, value: &Map<String, Value>) -> bool {
    filter.iter().all(|(field, condition)| {
        let found = value.get(field);
        match condition {
            Value::Object(ops) if !ops.is_empty() && ops.keys().all(|k| k.starts_with('$')) => {
                ops.iter().all(|(op, operand)| compare(op, found, operand))
            }
            _ => found == Some(condition),
        }
    })
}

/// `found op operand`; an unknown operator matches nothing.
fn compare(op: &str, found: Option<&Value>, operand: &Value) -> bool {
    let order = || -> Option<Ordering> {
        match (found?, operand) {
            (Value::Number(a), Value::Number(b)) => a.as_f64()?.partial_cmp(&b.as_f64()?),
            (Value::String(a), Value::String(b)) => Some(a.cmp(b)),
            _ => None,
        }
    };
    match op {
        "$eq" => found == Some(operand),
        "$ne" => found != Some(operand),
        "$gt" => order() == Some(Ordering::Greater),
        "$gte" => matches!(order(), Some(Ordering::Greater | Ordering::Equal)),
        "$lt" => order() == Some(Ordering::Less),
        "$lte" => matches!(order(), Some(Ordering::Less | Ordering::Equal)),
        _ => false,
    }
}

/// The cosine of the angle between `a` and `b` (0 for vectors of other lengths or no length).
fn cosine(a: &[f32], b: &[f32]) -> f64 {
    if a.len() != b.len() {
        return 0.0;
    }
    let (mut dot, mut aa, mut bb) = (0.0f64, 0.0f64, 0.0f64);
    for (x, y) in a.iter().zip(b) {
        let (x, y) = (f64::from(*x), f64::from(*y));
        dot += x * y;
        aa += x * x;
        bb += y * y;
    }
    if aa == 0.0 || bb == 0.0 {
        return 0.0;
    }
    dot / (aa.sqrt() * bb.sqrt())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn filters_compare_fields_with_operators() {
        let value = json!({ "age": 40, "name": "ada" });
        let value = value.as_object().unwrap();
        let yes = |f: Value| filter_matches(f.as_object().unwrap(), value);
        assert!(yes(json!({ "name": "ada" })));
        assert!(!yes(json!({ "name": "bob" })));
        assert!(yes(json!({ "age": { "$gte": 40, "$lt": 41 } })));
        assert!(!yes(json!({ "age": { "$gt": 40 } })));
        assert!(yes(json!({ "name": { "$ne": "bob" } })));
        assert!(!yes(json!({ "missing": { "$gt": 1 } })));
        assert!(!yes(json!({ "age": { "$near": 1 } })), "an unknown operator matches nothing");
    }

    #[test]
    fn cosine_of_vectors() {
        assert!((cosine(&[1.0, 0.0], &[2.0, 0.0]) - 1.0).abs() < 1e-9);
        assert!(cosine(&[1.0, 0.0], &[0.0, 1.0]).abs() < 1e-9);
        assert_eq!(cosine(&[1.0], &[1.0, 2.0]), 0.0);
        assert_eq!(cosine(&[0.0, 0.0], &[1.0, 2.0]), 0.0);
    }

    #[test]
    fn ids_round_trip_and_bad_names_are_refused() {
        let id = item_id(&["users".into(), "ada".into()], "prefs").unwrap();
        assert_eq!(id.as_str(), r#"["users","ada","prefs"]"#);
        assert_eq!(decode_id(&id), Some((vec!["users".into(), "ada".into()], "prefs".into())));
        for (ns, key) in
            [(vec![], "k"), (vec!["a.b".to_owned()], "k"), (vec![String::new()], "k"), (vec!["a".into()], "")]
        {
            assert!(matches!(item_id(&ns, key), Err(Error::Memory { .. })), "{ns:?} {key:?}");
        }
    }
}
