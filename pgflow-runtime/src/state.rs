//! Application state handed to step handlers: the database pool, HTTP client and configuration
//! an application builds once and its handlers share.

use std::any::Any;
use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

/// A flow's application state as a handler parameter.
///
/// Declare the type on the flow (`#[flow(state = AppState)]`), give the value to the flow's
/// `deployment(state)` (the worker carries it), and take `state: pgflow::State<AppState>` in
/// any handler. Every task shares one value behind an [`Arc`]: cloning a `State` is cheap, and
/// state a handler changes needs its own synchronisation (a pool, an atomic, a mutex).
///
/// A handler asking for a state type its flow does not declare is a compile error at that
/// parameter.
pub struct State<T>(Arc<T>);

impl<T> State<T> {
    /// Wraps shared state.
    pub fn new(state: Arc<T>) -> Self {
        Self(state)
    }

    /// The shared value.
    pub fn arc(&self) -> &Arc<T> {
        &self.0
    }
}

impl<T> Deref for State<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T> Clone for State<T> {
    fn clone(&self) -> Self {
        Self(Arc::clone(&self.0))
    }
}

impl<T: fmt::Debug> fmt::Debug for State<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("State").field(&*self.0).finish()
    }
}

/// A flow's state with its type erased, as a worker's handler table holds it next to the
/// flow's step adapters.
pub type SharedState = Arc<dyn Any + Send + Sync>;
