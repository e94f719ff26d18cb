//! Pauses from inside a node: [`Hitl`] and [`Pause`].
//!
//! An `interruptible` node receives `&mut Hitl`. The first time it calls
//! [`Hitl::interrupt`], the run pauses (the node's update is discarded); when the thread is
//! resumed with an answer, the node runs again from its start and that call returns the answer.
//! Calls are matched by order: a node that asks two questions pauses twice.
//!
//! The engine learns of a pause from the `Hitl`, never from the node's error value: [`Pause`]
//! is only what `interrupt` returns so that `?` leaves the node. `Hitl::answering` and
//! `Hitl::paused_with` let unit tests of a node function run it without an engine.

use serde::de::DeserializeOwned;
use serde::Serialize;
use std::fmt;

/// The pause handle of an `interruptible` node.
///
/// ```
/// # use tea::prelude::*;
/// # #[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
/// # struct Order { item: String, quantity: u32 }
/// fn confirm(order: &Order, hitl: &mut Hitl) -> Result<OrderUpdate, Pause> {
///     let quantity: u32 = hitl.interrupt(format!("How many {}?", order.item))?;
///     Ok(Order::update().quantity(quantity))
/// }
/// # graph! { Shop for Order { start -> confirm; confirm -> end; interruptible confirm; } }
/// let app = Shop::builder().checkpointer(MemoryStore::new()).build();
/// let (_, resume) = app.invoke(Order { item: "mugs".into(), ..Order::default() })?.interrupted().unwrap();
/// assert_eq!(resume.interrupts()[0].value(), "How many mugs?");
/// let order = app.resume(resume.answer(3))?.done().unwrap();
/// assert_eq!(order.quantity, 3);
/// # Ok::<(), tea::Error>(())
/// ```
#[derive(Debug, Default)]
pub struct Hitl {
    answers: Vec<serde_json::Value>,
    calls: usize,
    pub(crate) asked: Option<Asked>,
}

/// What a node's `interrupt` call left for the engine.
#[derive(Debug)]
pub(crate) enum Asked {
    /// The node paused with this payload.
    Pause(serde_json::Value),
    /// The answer to call `index` did not deserialize as `expected`.
    BadAnswer { expected: &'static str, reason: String },
    /// The payload did not serialize.
    BadPayload(String),
    /// A subgraph node's child graph paused on these pauses (listed as the parent sees them).
    Child(Vec<crate::format::interrupt::Interrupt>),
}

impl Hitl {
    pub(crate) fn with_answers(answers: Vec<serde_json::Value>) -> Self {
        Hitl { answers, calls: 0, asked: None }
    }

    pub(crate) fn into_answers(self) -> Vec<serde_json::Value> {
        self.answers
    }

    /// The answers this run of the node was given (a subgraph node reads its child's thread and
    /// the answers meant for its child here).
    pub(crate) fn given(&self) -> &[serde_json::Value] {
        &self.answers
    }

    /// Pauses a subgraph node on its child's `pauses`; `memo` is what the node is given back
    /// (first among its answers) when it runs again on resume.
    pub(crate) fn pause_child(
        &mut self,
        memo: serde_json::Value,
        pauses: Vec<crate::format::interrupt::Interrupt>,
    ) -> Pause {
        self.answers = vec![memo];
        self.asked = Some(Asked::Child(pauses));
        Pause { _private: () }
    }

    /// Pauses the run with `payload` (what the node asks) the first time; on resume, returns the
    /// answer deserialized as `T`. Propagate the error with `?`: it is how the node stops.
    ///
    /// # Errors
    /// [`Pause`] when the run pauses here (or when the answer does not deserialize as `T`: the
    /// run then fails with `Error::BadResumeValue` and the thread stays resumable).
    pub fn interrupt<T: DeserializeOwned>(&mut self, payload: impl Serialize) -> Result<T, Pause> {
        self.ask(payload, |answer| T::deserialize(answer))
    }

    /// [`interrupt`](Self::interrupt) for an interrupt node writing into a field of type `T`:
    /// an answer that is not itself a `T` but whose one-element list is (a `String` for a
    /// `Vec<String>` field) is taken as that list, so an `append` field collects one entry per
    /// answer.
    pub(crate) fn interrupt_for_field<T: DeserializeOwned>(&mut self, payload: impl Serialize) -> Result<T, Pause> {
        self.ask(payload, field_answer::<T>)
    }

    fn ask<T>(
        &mut self,
        payload: impl Serialize,
        decode: impl FnOnce(&serde_json::Value) -> Result<T, serde_json::Error>,
    ) -> Result<T, Pause> {
        let index = self.calls;
        self.calls += 1;
        if self.asked.is_some() {
            // An earlier call already paused or failed; the node ignored it. Stop again.
            return Err(Pause { _private: () });
        }
        match self.answers.get(index) {
            Some(answer) => match decode(answer) {
                Ok(value) => Ok(value),
                Err(error) => {
                    let expected = std::any::type_name::<T>();
                    self.asked = Some(Asked::BadAnswer { expected, reason: error.to_string() });
                    Err(Pause { _private: () })
                }
            },
            None => {
                self.asked = Some(match serde_json::to_value(payload) {
                    Ok(payload) => Asked::Pause(payload),
                    Err(error) => Asked::BadPayload(error.to_string()),
                });
                Err(Pause { _private: () })
            }
        }
    }

    /// How many answers this run of the node has (one per earlier pause it was resumed from).
    pub fn answered(&self) -> usize {
        self.answers.len()
    }

    /// A `Hitl` for calling an interruptible node function outside a run, as a unit test does:
    /// its `interrupt` calls return `answers` in order, and the first call beyond them pauses.
    /// `Hitl::default()` has no answers.
    ///
    /// ```
    /// # use tea::prelude::*;
    /// fn ask(hitl: &mut Hitl) -> Result<u32, Pause> {
    ///     hitl.interrupt("How many?")
    /// }
    /// let mut first = Hitl::default();
    /// assert!(ask(&mut first).is_err());
    /// assert_eq!(first.paused_with(), Some(&serde_json::json!("How many?")));
    /// let mut resumed = Hitl::answering([serde_json::json!(3)]);
    /// assert_eq!(ask(&mut resumed), Ok(3));
    /// assert_eq!(resumed.paused_with(), None);
    /// ```
    pub fn answering(answers: impl IntoIterator<Item = serde_json::Value>) -> Self {
        Hitl::with_answers(answers.into_iter().collect())
    }

    /// The payload this run of the node paused with, if one of its `interrupt` calls paused.
    pub fn paused_with(&self) -> Option<&serde_json::Value> {
        match &self.asked {
            Some(Asked::Pause(payload)) => Some(payload),
            _ => None,
        }
    }
}

/// An interrupt node's answer as the value of its field: the answer itself, or else a single
/// answer as a one-element list (a `String` for a `Vec<String>` field).
pub(crate) fn field_answer<T: DeserializeOwned>(answer: &serde_json::Value) -> Result<T, serde_json::Error> {
    T::deserialize(answer).or_else(|error| match answer {
        serde_json::Value::Array(_) => Err(error),
        single => T::deserialize(serde_json::Value::Array(vec![single.clone()])).map_err(|_| error),
    })
}

/// Checks that `answer` fits an interrupt node's field before a resume claims the thread
/// (generated code calls this; `_field` only tells the field's type).
#[doc(hidden)]
pub fn check_field_answer<T: DeserializeOwned>(
    answer: &serde_json::Value,
    _field: impl FnOnce(T),
) -> Result<(), (&'static str, String)> {
    field_answer::<T>(answer).map(drop).map_err(|error| (std::any::type_name::<T>(), error.to_string()))
}

/// The error [`Hitl::interrupt`] returns when the run pauses: propagate it with `?`.
///
/// It is a `std::error::Error + Send + Sync + 'static`, so `?` works in nodes returning
/// `Result<_, Pause>`, a boxed error or `anyhow::Error`; the engine knows the pause from the
/// `Hitl`, whatever the node turns the error into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pause {
    _private: (),
}

impl fmt::Display for Pause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the node paused for input")
    }
}

impl std::error::Error for Pause {}
