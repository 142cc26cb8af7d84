//! In a VM every command has a cgroup of its own, which holds: what it
//! leaves behind ends with it, and its memory and process bounds count
//! there.

use super::run;
use crate::common::text;
use crate::common::vm::{self, Options, Vm};
use std::time::Duration;
use warden::wire::client::Client;
use warden::wire::Request;

/// In a VM every command runs in a cgroup of its own: the layer is
/// proven at boot, whatever a command leaves behind ends with it by
/// cgroup.kill, its memory bound holds against memfd and many processes
/// (the whole command is killed and the exit says why, while warden and
/// the machine go on), and its process bound counts in the cgroup.
#[test]
fn in_a_vm_every_command_has_a_cgroup_that_holds() {
    vm::guard();
    let Some(kit) = vm::kit("in_a_vm_every_command_has_a_cgroup_that_holds") else {
        return;
    };
    let _one = vm::one_at_a_time();
    let mut vm = Vm::launch(&kit, Options::default());
    vm.wait_ready(Duration::from_secs(90));
    let mut client = vm.client();
    the_cgroup_layers_are_proven_at_boot(&mut client);
    escapes_of_every_kind_end_with_the_command(&mut client);
    statuses_at_once_leave_the_layers_holding(&vm, &mut client);
    a_memory_bound_kills_the_whole_command(&mut client);
    a_process_bound_counts_in_the_cgroup(&mut client);
    the_audit_log_says_why(&mut vm, &mut client);
}

/// The layers as status has them: cgroups holds (its detail says "could
/// not fork", as proven at boot), and a command's lifetime is ended by
/// cgroup.kill.
fn the_cgroup_layers_are_proven_at_boot(client: &mut Client) {
    let status = client.status().unwrap();
    let layer = |name: &str| crate::common::layer(&status, name);
    let cgroups = layer("cgroups");
    eprintln!("cgroups: {}", cgroups.detail);
    assert!(cgroups.holds, "{}", cgroups.detail);
    assert!(
        cgroups.detail.contains("could not fork"),
        "{}",
        cgroups.detail
    );
    let lifetime = layer("lifetime");
    assert!(
        lifetime.detail.starts_with("cgroup.kill"),
        "{}",
        lifetime.detail
    );
}

/// Statuses at once (serve's look, a `ps`, the owner's `status`; six
/// connections, three each)
/// each prove the layers again with a probe of its own cgroup: they take
/// turns, every layer still holds, and the next command runs.
fn statuses_at_once_leave_the_layers_holding(vm: &Vm, client: &mut Client) {
    let clients: Vec<Client> = (0..6).map(|_| vm.client()).collect();
    std::thread::scope(|scope| {
        for mut other in clients {
            scope.spawn(move || {
                for _ in 0..3 {
                    other.status().unwrap();
                }
            });
        }
    });
    let status = client.status().unwrap();
    for layer in ["cgroups", "seccomp", "landlock"] {
        let state = crate::common::layer(&status, layer);
        assert!(
            state.holds,
            "{layer} after statuses at once: {}",
            state.detail
        );
    }
    let out = client.run(run("true")).unwrap();
    assert_eq!(
        out.exit.status, 0,
        "a command after statuses at once: {out:?}"
    );
}

/// Escapes of every kind, then a look, as shell, for what is left.
fn escapes_of_every_kind_end_with_the_command(client: &mut Client) {
    let escapes = "setsid sh -c 'sleep 771 &'; (sleep 772 &); nohup sleep 773 >/dev/null 2>&1 & \
                   bash -c 'sleep 774 & disown'; \
                   python3 -c 'import os; os.fork() or (os.setsid(), os.fork() or os.execvp(\"sleep\", [\"sleep\", \"775\"]))'; \
                   echo started";
    let out = client.run(run(escapes)).unwrap();
    assert_eq!(
        (out.exit.status, text(&out.stdout)),
        (0, "started\n".into()),
        "{out:?}"
    );
    assert!(out.exit.limit.is_none(), "{out:?}");
    let look = "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done | grep -c '^sleep 77' || true";
    let out = client.run(run(look)).unwrap();
    assert_eq!(text(&out.stdout).trim(), "0", "left alive: {out:?}");
}

/// A memory bound of 64 MiB against a memfd of 200 MiB and four
/// processes of 40 MiB: the command is killed as a whole, and says why.
fn a_memory_bound_kills_the_whole_command(client: &mut Client) {
    let mut bomb = run(
        "for i in 1 2 3 4; do python3 -c 'b = bytearray(40 << 20); import time; time.sleep(30)' & done; \
         python3 -c 'import os; fd = os.memfd_create(\"x\"); [os.write(fd, bytes(1 << 20)) for _ in range(200)]; print(\"NOT STOPPED\")'; wait",
    );
    bomb.limits = Some(warden::wire::Limits {
        memory_bytes: Some(64 << 20),
        ..Default::default()
    });
    let out = client.run(bomb).unwrap();
    eprintln!("memory bomb: {:?}", out.exit);
    assert_eq!(out.exit.limit.as_deref(), Some("memory"), "{out:?}");
    assert!(!text(&out.stdout).contains("NOT STOPPED"), "{out:?}");
    let after = client.run(run("echo alive")).unwrap();
    assert_eq!(text(&after.stdout), "alive\n", "{after:?}");
    assert!(client.status().unwrap().pid1);
}

/// A process bound of 8: forks past it fail, counted by the cgroup.
fn a_process_bound_counts_in_the_cgroup(client: &mut Client) {
    let mut forks = run("for i in $(seq 20); do sleep 3 & done; wait");
    forks.limits = Some(warden::wire::Limits {
        processes: Some(8),
        ..Default::default()
    });
    let out = client.run(forks).unwrap();
    eprintln!(
        "forks past 8: {:?} {}",
        out.exit,
        text(&out.stderr).lines().next().unwrap_or("")
    );
    assert_ne!(out.exit.status, 0, "{out:?}");
    assert_eq!(out.exit.limit.as_deref(), Some("processes"), "{out:?}");
}

/// The audit log says why (read once the VM is off).
fn the_audit_log_says_why(vm: &mut Vm, client: &mut Client) {
    client.send(0, &Request::Shutdown).unwrap();
    let _ = client.receive();
    assert!(vm
        .wait_exit(Duration::from_secs(60))
        .is_some_and(|s| s.success()));
    let log = vm.data_file("/audit/warden.jsonl");
    let ends: Vec<serde_json::Value> = log
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|l| l["kind"] == "command_end")
        .collect();
    for limit in ["memory", "processes"] {
        assert!(
            ends.iter().any(|e| e["limit"] == limit),
            "no command_end with limit {limit}: {ends:?}"
        );
    }
    // The first command was the escapes. Those still in its process group
    // die with it (the group kill at its exit); the two that left it
    // (setsid, the daemon's double fork) were found in its cgroup.
    eprintln!("escapes' end: {}", ends[0]);
    assert!(
        ends[0]["left_behind_killed"].as_u64() >= Some(2),
        "the escapes' end is not audited: {}",
        ends[0]
    );
}
