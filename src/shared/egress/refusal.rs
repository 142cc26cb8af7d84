//! Why the egress proxy refuses a connection: a kind, named by a stable
//! word that readers of the audit log may match on, the HTTP status the
//! client gets for it, and a reason in words for people.

/// What went wrong, in classes a reader of the audit log can count. Each
/// kind has one status and one word; the words never change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The request could not be read or is not one the proxy carries.
    BadRequest,
    /// The request's target is malformed or oddly spelled.
    BadTarget,
    /// The request head, or its number of fields, is over the limit.
    HeadTooLarge,
    /// No complete request head in time.
    HeadTimeout,
    /// A body framed other than by Content-Length.
    LengthRequired,
    /// Every tunnel slot is taken.
    TooManyConnections,
    /// The default host list is not worked out yet.
    ListNotKnown,
    /// An IP address as the target instead of a name.
    IpTarget,
    /// The name and port are not on the host list.
    NotListed,
    /// The name resolves only to addresses of a class the proxy refuses
    /// (loopback, private, metadata, ...).
    RefusedAddress,
    /// The name does not resolve.
    ResolveFailed,
    /// Resolving the name took too long.
    ResolveTimeout,
    /// The name resolved to no address at all.
    NoAddress,
    /// No allowed address took the connection.
    ConnectFailed,
    /// The runtime has a list of its own, and who asks could not be told.
    UnknownAsker,
    /// A request an opened host's rules do not allow.
    RuleRefused,
    /// An opened host's credential the owner did not hand over.
    CredentialMissing,
    /// An opened host where this proxy cannot open TLS.
    CannotOpen,
    /// An opened host's TLS failed (the client's or the origin's).
    OpenedTls,
}

impl Kind {
    pub const ALL: [Kind; 19] = [
        Kind::BadRequest,
        Kind::BadTarget,
        Kind::HeadTooLarge,
        Kind::HeadTimeout,
        Kind::LengthRequired,
        Kind::TooManyConnections,
        Kind::ListNotKnown,
        Kind::IpTarget,
        Kind::NotListed,
        Kind::RefusedAddress,
        Kind::ResolveFailed,
        Kind::ResolveTimeout,
        Kind::NoAddress,
        Kind::ConnectFailed,
        Kind::UnknownAsker,
        Kind::RuleRefused,
        Kind::CredentialMissing,
        Kind::CannotOpen,
        Kind::OpenedTls,
    ];

    /// The kind a word names (a VM's host relay answers with the words).
    pub fn from_word(word: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.as_str() == word)
    }

    /// The stable word: the audit line's `refusal` field.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::BadRequest => "bad_request",
            Kind::BadTarget => "bad_target",
            Kind::HeadTooLarge => "head_too_large",
            Kind::HeadTimeout => "head_timeout",
            Kind::LengthRequired => "length_required",
            Kind::TooManyConnections => "too_many_connections",
            Kind::ListNotKnown => "list_not_known",
            Kind::IpTarget => "ip_target",
            Kind::NotListed => "not_listed",
            Kind::RefusedAddress => "refused_address",
            Kind::ResolveFailed => "resolve_failed",
            Kind::ResolveTimeout => "resolve_timeout",
            Kind::NoAddress => "no_address",
            Kind::ConnectFailed => "connect_failed",
            Kind::UnknownAsker => "unknown_asker",
            Kind::RuleRefused => "rule_refused",
            Kind::CredentialMissing => "credential_missing",
            Kind::CannotOpen => "cannot_open",
            Kind::OpenedTls => "opened_tls",
        }
    }

    /// The HTTP status the client is answered with.
    pub fn status(self) -> u16 {
        match self {
            Kind::BadRequest | Kind::BadTarget => 400,
            Kind::IpTarget
            | Kind::NotListed
            | Kind::RefusedAddress
            | Kind::UnknownAsker
            | Kind::RuleRefused => 403,
            Kind::HeadTimeout => 408,
            Kind::LengthRequired => 411,
            Kind::HeadTooLarge => 431,
            Kind::ResolveFailed | Kind::NoAddress | Kind::ConnectFailed | Kind::OpenedTls => 502,
            Kind::TooManyConnections
            | Kind::ListNotKnown
            | Kind::CredentialMissing
            | Kind::CannotOpen => 503,
            Kind::ResolveTimeout => 504,
        }
    }
}

/// A refusal: its kind, and the reason (for the client, in a
/// `Warden-Reason` header and the body, and for the audit line).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub kind: Kind,
    pub reason: String,
}

impl Refused {
    pub fn new(kind: Kind, reason: impl Into<String>) -> Refused {
        Refused {
            kind,
            reason: reason.into(),
        }
    }

    pub fn status(&self) -> u16 {
        self.kind.status()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_table() {
        // The words are a promise to readers of the audit log: a change
        // here is a change of format.
        let cases = [
            (Kind::BadRequest, "bad_request", 400),
            (Kind::BadTarget, "bad_target", 400),
            (Kind::HeadTooLarge, "head_too_large", 431),
            (Kind::HeadTimeout, "head_timeout", 408),
            (Kind::LengthRequired, "length_required", 411),
            (Kind::TooManyConnections, "too_many_connections", 503),
            (Kind::ListNotKnown, "list_not_known", 503),
            (Kind::IpTarget, "ip_target", 403),
            (Kind::NotListed, "not_listed", 403),
            (Kind::RefusedAddress, "refused_address", 403),
            (Kind::ResolveFailed, "resolve_failed", 502),
            (Kind::ResolveTimeout, "resolve_timeout", 504),
            (Kind::NoAddress, "no_address", 502),
            (Kind::ConnectFailed, "connect_failed", 502),
            (Kind::RuleRefused, "rule_refused", 403),
            (Kind::CredentialMissing, "credential_missing", 503),
            (Kind::CannotOpen, "cannot_open", 503),
            (Kind::OpenedTls, "opened_tls", 502),
        ];
        for (kind, word, status) in cases {
            assert_eq!((kind.as_str(), kind.status()), (word, status), "{kind:?}");
        }
        for kind in Kind::ALL {
            assert_eq!(Kind::from_word(kind.as_str()), Some(kind));
        }
        assert_eq!(Kind::from_word("no_such_kind"), None);
    }
}
