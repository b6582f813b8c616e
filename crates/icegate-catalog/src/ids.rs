//! Ids of stored objects, typed: a warehouse's id is not a table's, and neither is a
//! principal's, so no call can pass one where another is meant. The store mints them (and
//! reads them back); the edge resolves what a request names (a prefix, a namespace and a name,
//! a principal's credentials) to them; everything between takes them typed. Opaque otherwise:
//! they read as the strings they are stored as.

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default, serde::Serialize, serde::Deserialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            /// The id as stored (minted by the store, or read back from it).
            pub fn new(id: impl Into<String>) -> Self {
                Self(id.into())
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }

            pub fn into_string(self) -> String {
                self.0
            }
        }

        impl From<&str> for $name {
            fn from(id: &str) -> Self {
                Self(id.to_owned())
            }
        }

        impl From<String> for $name {
            fn from(id: String) -> Self {
                Self(id)
            }
        }

        impl std::ops::Deref for $name {
            type Target = str;

            fn deref(&self) -> &str {
                &self.0
            }
        }

        // Hashes and compares as its string does: maps keyed by ids are looked up by `&str`.
        impl std::borrow::Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.0 == other
            }
        }

        impl PartialEq<String> for $name {
            fn eq(&self, other: &String) -> bool {
                self.0 == *other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.0 == *other
            }
        }
    };
}

id_type!(
    /// A warehouse's id: also the opaque, URL-safe prefix clients put in `/v1/{prefix}/...`.
    WarehouseId
);
id_type!(
    /// A namespace's id (grants on a namespace name it).
    NamespaceId
);
id_type!(
    /// A table's or view's id: what grants, decisions and swaps name (names change meaning,
    /// ids do not).
    TabularId
);
id_type!(
    /// A principal's id.
    PrincipalId
);
