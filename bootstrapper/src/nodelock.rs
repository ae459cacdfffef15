//! The node's point of no return: a state machine with two states,
//! unlocked and locked, and one transition from unlocked to locked. There is
//! no way back.
//!
//! The bootstrapper's InitServer and JoinClient race for it; the one that gets
//! a [`LockToken`] goes on (state disk, cluster), the other stops. A component
//! performs an irreversible step only while holding a token, so at most one of
//! them ever does.

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

/// The shared lock. Cloning gives another handle to the same lock.
#[derive(Clone, Default)]
pub struct NodeLock {
    holder: Arc<Mutex<Option<&'static str>>>,
}

impl NodeLock {
    /// A lock in the unlocked state.
    pub fn new() -> NodeLock {
        NodeLock::default()
    }

    /// Takes the lock for `holder` (e.g. `"init"`, `"join"`); `None` if it was
    /// taken already (by anyone, including `holder` itself).
    pub fn try_lock(&self, holder: &'static str) -> Option<LockToken> {
        let mut state = self.state();
        if state.is_some() {
            return None;
        }
        *state = Some(holder);
        Some(LockToken { holder })
    }

    /// Who took the lock, if anyone.
    pub fn holder(&self) -> Option<&'static str> {
        *self.state()
    }

    /// Whether the lock was taken.
    #[cfg(test)]
    pub fn is_locked(&self) -> bool {
        self.holder().is_some()
    }

    fn state(&self) -> MutexGuard<'_, Option<&'static str>> {
        // The guarded value is written once, by a plain assignment that cannot
        // panic halfway, so a poisoned mutex still holds a consistent state.
        self.holder.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl fmt::Debug for NodeLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.holder() {
            Some(h) => write!(f, "NodeLock(locked by {h:?})"),
            None => f.write_str("NodeLock(unlocked)"),
        }
    }
}

/// Proof of holding the node lock: only [`NodeLock::try_lock`] makes one, at
/// most once per lock. Not `Clone`; dropping it does not unlock the node.
#[derive(Debug)]
pub struct LockToken {
    // Shown in the token's Debug output; the tests read it.
    #[cfg_attr(not(test), expect(dead_code))]
    holder: &'static str,
}

impl LockToken {
    /// The name the lock was taken under.
    #[cfg(test)]
    pub fn holder(&self) -> &'static str {
        self.holder
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_transition_never_back() {
        let lock = NodeLock::new();
        assert!(!lock.is_locked());
        assert_eq!(lock.holder(), None);
        let token = lock.try_lock("init").expect("the first try wins");
        assert_eq!(token.holder(), "init");
        assert!(lock.is_locked());
        assert_eq!(lock.holder(), Some("init"));
        // Nobody takes it again, not even the holder, and dropping the token
        // does not unlock.
        assert!(lock.try_lock("join").is_none());
        assert!(lock.try_lock("init").is_none());
        {
            let _gone = token;
        }
        assert!(lock.try_lock("join").is_none());
        assert_eq!(lock.holder(), Some("init"));
        // A clone is the same lock.
        let other = lock.clone();
        assert!(other.try_lock("join").is_none());
        assert_eq!(other.holder(), Some("init"));
        assert_eq!(format!("{other:?}"), "NodeLock(locked by \"init\")");
    }
}

#[cfg(test)]
mod race_tests;
