//! Console sessions: in memory on the replica that signed the operator in, bounded, each
//! ending with its token. An id is 244 random bits, new at every sign-in (no fixation); the
//! CSRF token every form carries is another.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Sessions kept at most: past it, sign-ins are refused (no one's session is evicted by
/// another's sign-ins).
const MAX_SESSIONS: usize = 10_000;
/// One principal's sessions at most: its oldest goes when it signs in again.
const MAX_PER_PRINCIPAL: usize = 20;
/// How long a session lasts without a token lifetime to follow (authentication off).
const OPEN_SESSION: Duration = Duration::from_secs(8 * 3600);

#[derive(Clone, Debug)]
pub struct Session {
    /// The API token (`None`: authentication is off).
    pub token: Option<String>,
    /// Who signed in, as the API names them.
    pub principal: String,
    pub csrf: String,
    /// What the next page says once (the outcome of a form), then forgets.
    pub notice: Option<String>,
    created: Instant,
    expires: Instant,
}

#[derive(Default)]
pub struct Sessions {
    held: Mutex<HashMap<String, Session>>,
    /// With authentication off: the one session every visitor shares (there is no one to tell
    /// apart; its CSRF token still keeps other sites' forms out).
    open: Mutex<Option<String>>,
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
    /// Opens a session; answers its id. `None` when the console holds as many as it may.
    pub fn open(
        &self,
        token: Option<String>,
        principal: String,
        lifetime: Option<Duration>,
    ) -> Option<(String, Session)> {
        let now = Instant::now();
        let session = Session {
            token,
            principal,
            csrf: random_token(),
            notice: None,
            created: now,
            expires: now.checked_add(lifetime.unwrap_or(OPEN_SESSION)).unwrap_or(now + OPEN_SESSION),
        };
        let id = random_token();
        let mut held = self.held.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        held.retain(|_, s| s.expires > now);
        let mine: Vec<(String, Instant)> = held
            .iter()
            .filter(|(_, s)| s.principal == session.principal)
            .map(|(id, s)| (id.clone(), s.created))
            .collect();
        if mine.len() >= MAX_PER_PRINCIPAL
            && let Some((oldest, _)) = mine.iter().min_by_key(|(_, created)| *created)
        {
            held.remove(oldest);
        }
        if held.len() >= MAX_SESSIONS {
            return None;
        }
        held.insert(id.clone(), session.clone());
        Some((id, session))
    }

    /// Leaves a notice for the session's next page.
    pub fn notify(&self, id: &str, notice: String) {
        if let Some(session) = self.held.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get_mut(id) {
            session.notice = Some(notice);
        }
    }

    /// The session's notice, once.
    pub fn take_notice(&self, id: &str) -> Option<String> {
        self.held.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get_mut(id).and_then(|s| s.notice.take())
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

    /// The shared session of a console without authentication.
    pub fn open_session(&self) -> Option<(String, Session)> {
        let mut shared = self.open.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(id) = shared.as_ref()
            && let Some(session) = self.get(id)
        {
            return Some((id.clone(), session));
        }
        let (id, session) = self.open(None, "anonymous (authentication is off)".into(), None)?;
        *shared = Some(id.clone());
        Some((id, session))
    }

    /// Ends every session holding `token`.
    pub fn close_token(&self, token: &str) {
        self.held
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .retain(|_, s| s.token.as_deref().is_none_or(|held| !same(held, token)));
    }

    pub fn close(&self, id: &str) {
        self.held.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_principal_signing_in_again_and_again_evicts_only_its_own_sessions() {
        let sessions = Sessions::default();
        let (admin, _) = sessions.open(Some("t".into()), "admin".into(), None).unwrap();
        let mut narrow = Vec::new();
        for _ in 0..(MAX_PER_PRINCIPAL * 3) {
            narrow.push(sessions.open(Some("n".into()), "narrow".into(), None).unwrap().0);
        }
        assert!(sessions.get(&admin).is_some(), "another principal's sign-ins never evict this one");
        let kept = narrow.iter().filter(|id| sessions.get(id).is_some()).count();
        assert_eq!(kept, MAX_PER_PRINCIPAL);
        assert!(sessions.get(narrow.last().unwrap()).is_some(), "the newest is kept");
        // With authentication off, every visitor shares one session.
        let (first, _) = sessions.open_session().unwrap();
        assert_eq!(sessions.open_session().unwrap().0, first);
        // A notice is read once.
        sessions.notify(&admin, "done".into());
        assert_eq!(sessions.take_notice(&admin).as_deref(), Some("done"));
        assert_eq!(sessions.take_notice(&admin), None);
        assert!(same("abc", "abc") && !same("abc", "abd") && !same("abc", "ab"));
        // A lifetime no clock can add (an identity provider's `expires_in`) does not panic.
        assert!(sessions.open(Some("t".into()), "far".into(), Some(Duration::MAX)).is_some());
    }
}
