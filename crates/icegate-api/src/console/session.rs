//! Console sessions: in memory on the replica that signed the operator in, bounded, each
//! ending with its token. An id is 244 random bits, new at every sign-in (no fixation); the
//! CSRF token every form carries is another.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Sessions kept at most; the oldest goes first.
const MAX_SESSIONS: usize = 10_000;
/// How long a session lasts without a token lifetime to follow (authentication off).
const OPEN_SESSION: Duration = Duration::from_secs(8 * 3600);

#[derive(Clone, Debug)]
pub struct Session {
    /// The API token (`None`: authentication is off).
    pub token: Option<String>,
    /// Who signed in, as the API names them.
    pub principal: String,
    pub csrf: String,
    created: Instant,
    expires: Instant,
}

#[derive(Default)]
pub struct Sessions {
    held: Mutex<HashMap<String, Session>>,
}

/// A new unguessable token.
pub fn random_token() -> String {
    format!("{}{}", uuid::Uuid::new_v4().simple(), uuid::Uuid::new_v4().simple())
}

/// Equal without telling how much of it matched.
pub fn same(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl Sessions {
    /// Opens a session; answers its id.
    pub fn open(&self, token: Option<String>, principal: String, lifetime: Option<Duration>) -> (String, Session) {
        let now = Instant::now();
        let session = Session {
            token,
            principal,
            csrf: random_token(),
            created: now,
            expires: now + lifetime.unwrap_or(OPEN_SESSION),
        };
        let id = random_token();
        let mut held = self.held.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        held.retain(|_, s| s.expires > now);
        if held.len() >= MAX_SESSIONS
            && let Some(oldest) = held.iter().min_by_key(|(_, s)| s.created).map(|(id, _)| id.clone())
        {
            held.remove(&oldest);
        }
        held.insert(id.clone(), session.clone());
        (id, session)
    }

    pub fn get(&self, id: &str) -> Option<Session> {
        let mut held = self.held.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match held.get(id) {
            Some(session) if session.expires > Instant::now() => Some(session.clone()),
            Some(_) => {
                held.remove(id);
                None
            }
            None => None,
        }
    }

    pub fn close(&self, id: &str) {
        self.held.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(id);
    }
}
