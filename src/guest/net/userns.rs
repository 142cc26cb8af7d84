//! The uid the firewall must name. nftables' `meta skuid` compares a
//! socket's owner as the network namespace's own user namespace counts it.
//! Usually that is warden's user namespace; under rootless podman with
//! keep-id the network namespace belongs to the parent user namespace, in
//! which shell's uid is another number (the owner's).

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;

/// Why the uid the network counts could not be found.
#[derive(Debug, thiserror::Error)]
pub enum UsernsError {
    /// Opening a namespace's file, or asking it for a related one.
    #[error("{path}: {error}")]
    Namespace {
        path: &'static str,
        #[source]
        error: io::Error,
    },
    #[error("user ns: {0}")]
    OwnUser(#[source] io::Error),
    #[error("namespace: {0}")]
    Inode(#[source] io::Error),
    #[error(
        "the network namespace belongs to a user namespace that is not warden's nor its parent"
    )]
    NeitherOwnNorParent,
    #[error("uid_map: {0}")]
    UidMap(#[source] io::Error),
    #[error("uid {0} has no number in the user namespace that owns the network")]
    Unmapped(u32),
}

/// `uid` of warden's user namespace, as the network namespace counts it.
pub fn seen_by_network(uid: u32) -> Result<u32, UsernsError> {
    let network_owner = related("/proc/self/ns/net", libc::NS_GET_USERNS)?;
    let own = inode(&File::open("/proc/self/ns/user").map_err(UsernsError::OwnUser)?)?;
    if network_owner == own {
        return Ok(uid);
    }
    let parent = related("/proc/self/ns/user", libc::NS_GET_PARENT)?;
    if parent != network_owner {
        return Err(UsernsError::NeitherOwnNorParent);
    }
    let map = std::fs::read_to_string("/proc/self/uid_map").map_err(UsernsError::UidMap)?;
    map_up(&map, uid).ok_or(UsernsError::Unmapped(uid))
}

/// The inode of the namespace `request` (NS_GET_USERNS, NS_GET_PARENT)
/// finds from the namespace at `path`.
fn related(path: &'static str, request: libc::Ioctl) -> Result<u64, UsernsError> {
    let failed = |error| UsernsError::Namespace { path, error };
    let file = File::open(path).map_err(failed)?;
    // SAFETY: both requests take no argument and return a new file
    // descriptor or -1; `file` stays open across the call.
    let fd = unsafe { libc::ioctl(file.as_raw_fd(), request) };
    if fd < 0 {
        return Err(failed(io::Error::last_os_error()));
    }
    // SAFETY: the kernel just returned this descriptor; nothing else owns it.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    inode(&File::from(owned))
}

fn inode(file: &File) -> Result<u64, UsernsError> {
    file.metadata().map(|m| m.ino()).map_err(UsernsError::Inode)
}

/// `uid` of a user namespace, in its parent's numbers, through the
/// namespace's uid_map (`inside outside count` per line).
pub fn map_up(uid_map: &str, uid: u32) -> Option<u32> {
    uid_map.lines().find_map(|line| {
        let mut f = line.split_whitespace().map(|n| n.parse::<u64>().ok());
        let (inside, outside, count) = (f.next()??, f.next()??, f.next()??);
        let uid = u64::from(uid);
        (inside <= uid && uid < inside + count)
            .then(|| u32::try_from(outside + (uid - inside)).ok())
            .flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uid_maps() {
        let keep_id = "         0          1       2001\n      2001          0          1\n      2002       2002      63535\n";
        let rootless = "0 1001 1\n1 100000 65536\n";
        let table = [
            (keep_id, 2001, Some(0)),
            (keep_id, 0, Some(1)),
            (keep_id, 2000, Some(2001)),
            (keep_id, 2002, Some(2002)),
            (keep_id, 65537, None),
            (rootless, 0, Some(1001)),
            (rootless, 2001, Some(102000)),
            ("0 0 4294967295\n", 2001, Some(2001)),
            ("", 2001, None),
            ("garbage\n", 2001, None),
        ];
        for (map, uid, want) in table {
            assert_eq!(map_up(map, uid), want, "{map:?} {uid}");
        }
    }

    #[test]
    fn a_process_in_its_own_network_counts_uids_alike() {
        // The tests run in a network namespace of their own user namespace
        // (the host's, or a container's): no translation.
        assert_eq!(seen_by_network(2001).map_err(|e| e.to_string()), Ok(2001));
    }
}
