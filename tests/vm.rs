//! warden as PID 1 of a micro-VM, under QEMU's software emulation: it boots
//! from the initramfs onto its root disk, serves the API over vsock with
//! the machine's key, confines commands as it does in a container, and
//! powers the VM off at the end. The host reaches the guest's vsock only
//! through vhost-device-vsock's unix socket, and every test runs under the
//! AF_VSOCK guard (tests/common/vm.rs): this host's own vsock is never
//! touched. The tests are in tests/vm/, by concern; what they share is
//! here.

mod common;

#[path = "vm/boot.rs"]
mod boot;
#[path = "vm/cgroups.rs"]
mod cgroups;
#[path = "vm/launcher.rs"]
mod launcher;
#[path = "vm/lends.rs"]
mod lends;

use common::text;
use std::process::Command;
use warden::wire::RunRequest;

fn run(line: &str) -> RunRequest {
    RunRequest {
        shell: Some(line.to_string()),
        ..Default::default()
    }
}

/// `warden ARGS` from the host (the guard inherited), its output shown
/// when an assertion fails.
fn warden(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(common::warden_bin())
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    (out.status.success(), text(&out.stdout), text(&out.stderr))
}
