//! The runtime's own network: its list of hosts (`runtime_hosts`) held by
//! the firewall or by a connect gate of its own, and its listens limited to
//! its published ports (`runtime_ports`).

use crate::common::net::{boot, policy, Net};
use crate::common::{self, privileged};
use serde_json::json;

/// The runtime on a list of its own (`runtime_hosts`): its main process
/// reaches its host through the proxy, is refused a host only shell's list
/// has, and gets nowhere directly; status counts its traffic by host, and
/// shell keeps its own list.
#[test]
fn the_runtime_reaches_only_its_own_hosts() {
    if !privileged("the_runtime_reaches_only_its_own_hosts") {
        return;
    }
    let net = runtime_reaches_only_its_own_hosts(false);
    let status = net.machine.client().status().unwrap();
    let layer = common::layer(&status, "runtime_network");
    assert!(layer.detail.contains("reach only the proxy"), "{layer:?}");
}

/// The same where nftables cannot hold (no CAP_NET_ADMIN): the runtime's
/// processes are forked under a gate of their own, which connects them to
/// the proxy alone; the refusal is audited as the runtime's.
#[test]
fn the_runtime_reaches_only_its_own_hosts_through_the_connect_gate() {
    if !privileged("the_runtime_reaches_only_its_own_hosts_through_the_connect_gate") {
        return;
    }
    let net = runtime_reaches_only_its_own_hosts(true);
    let status = net.machine.client().status().unwrap();
    let layer = common::layer(&status, "runtime_network");
    assert!(
        layer.detail.contains("held by warden's connect gate"),
        "{layer:?}"
    );
    println!("{}", layer.detail);
    let refused = net.machine.audit_kinds("connect_refused");
    assert!(
        refused
            .iter()
            .any(|l| l["user"] == "runtime"
                && l["address"].as_str().unwrap_or("").ends_with(":8080")),
        "{refused:?}"
    );
}

/// Where warden's connect gate holds the runtime (no nftables: on the
/// host's network, its listens would be servers there), the runtime listens
/// on its published ports only (`runtime_ports`), and on unix sockets.
#[test]
fn the_runtime_listens_only_on_its_published_ports_through_the_connect_gate() {
    if !privileged("the_runtime_listens_only_on_its_published_ports_through_the_connect_gate") {
        return;
    }
    let script = r#"
import os, socket
home = os.environ["HOME"]
said = []
for port in (0, 3000, 3001):
    s = socket.socket(socket.AF_INET6 if port == 3001 else socket.AF_INET)
    try:
        if port:
            s.bind(("::" if port == 3001 else "0.0.0.0", port))
        s.listen()
        said.append(f"{port}: listening")
    except OSError as e:
        said.append(f"{port}: errno {e.errno}")
u = socket.socket(socket.AF_UNIX)
u.bind(home + "/u.sock")
u.listen()
said.append("unix: listening")
open(home + "/out.txt", "w").write("\n".join(said) + "\n")
os.rename(home + "/out.txt", home + "/done.txt")
import time; time.sleep(1000)
"#;
    let net = boot(
        |internet| {
            let mut p = policy(internet);
            p["runtime_hosts"] = json!(["allowed.test"]);
            p
        },
        |o| {
            o.main = vec!["python3".into(), "-c".into(), script.into()];
            o.drop_caps = vec!["net_admin".into()];
            o.config["runtime_ports"] = json!([3000]);
        },
    );
    let out = what_the_main_process_wrote(&net);
    eprintln!("{out}");
    assert!(out.contains("0: errno 13"), "{out}");
    assert!(out.contains("3000: listening"), "{out}");
    assert!(out.contains("3001: errno 13"), "{out}");
    assert!(out.contains("unix: listening"), "{out}");
}

/// The runtime's main process (bash) on a list of its own, with or
/// without CAP_NET_ADMIN (`gated`): what it reached, what shell reaches,
/// and what status and the egress lines say of it.
fn runtime_reaches_only_its_own_hosts(gated: bool) -> Net {
    let net = boot_the_runtime_on_its_own_list(gated);
    let out = what_the_main_process_wrote(&net);
    assert!(out.contains("own: hello allowed.test /rt"), "{out}");
    // Node's own sockets (libuv: non-blocking connects) through the proxy.
    assert!(out.contains("node: HTTP/1.1 200"), "{out}");
    assert!(
        out.contains("shells: curl: (56) CONNECT tunnel failed, response 403"),
        "{out}"
    );
    // A direct connection is refused at once (curl: 7), and the runtime's
    // own DNS gets no answer (its datagrams are refused too).
    assert!(out.contains(" exit 7"), "{out}");
    assert!(out.contains("dns: exit 2"), "{out}");
    let queries = net.internet.dns_queries();
    assert!(
        !queries.contains("unlisted.test"),
        "the resolver saw: {queries}"
    );
    assert!(!net.internet.connections().contains("tcp 8080"));
    shell_keeps_its_own_list(&net);
    status_counts_the_runtimes_traffic_by_host(&net);
    the_egress_lines_say_which_list_decided(&net);
    net
}

/// A machine whose runtime, on `runtime_hosts` ["allowed.test"], tries its
/// own host, shell's, a direct connection, its own DNS and node's sockets,
/// and writes what each got to done.txt; handed the internet's address and
/// CA, which it waits for.
fn boot_the_runtime_on_its_own_list(gated: bool) -> Net {
    let script = r#"
ca=$HOME/ca.pem
while [ ! -s "$ca" ]; do sleep 0.1; done
{
  echo "own: $(curl -sS --max-time 20 --cacert $ca https://allowed.test/rt 2>&1)"
  echo "shells: $(curl -sS --max-time 20 --cacert $ca -o /dev/null -w '%{http_code}' https://www.allowed.test/x 2>&1)"
  echo "direct: $(curl -sS --max-time 10 --noproxy '*' http://$(cat $HOME/v4):8080/ 2>&1; echo " exit $?")"
  echo "dns: $(getent ahosts unlisted.test >/dev/null 2>&1; echo "exit $?")"
  echo "node: $(node -e 'const s = require("net").connect(3128, "127.0.0.1", () => s.write("CONNECT allowed.test:443 HTTP/1.1\r\nHost: allowed.test:443\r\n\r\n")); s.once("data", d => { console.log(String(d).split("\r\n")[0]); s.destroy(); }); s.on("error", e => console.log("error " + e.code));' 2>&1)"
} > $HOME/out.txt
mv $HOME/out.txt $HOME/done.txt
sleep 1000
"#;
    let net = boot(
        |internet| {
            let mut p = policy(internet);
            p["runtime_hosts"] = json!(["allowed.test"]);
            p
        },
        |o| {
            o.main = vec!["bash".into(), "-c".into(), script.into()];
            if gated {
                o.drop_caps = vec!["net_admin".into()];
            }
        },
    );
    let home = &net.machine.home;
    std::fs::write(home.join("v4"), net.internet.v4.to_string()).unwrap();
    let ca = home.join("ca.pem");
    std::fs::copy(&net.internet.ca, &ca).unwrap();
    std::os::unix::fs::chown(&ca, Some(common::RUNTIME_UID), Some(common::RUNTIME_UID)).unwrap();
    net
}

/// What the main process wrote to done.txt in its home (waited for, up to
/// 60 s).
fn what_the_main_process_wrote(net: &Net) -> String {
    let done = net.machine.home.join("done.txt");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !done.exists() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    std::fs::read_to_string(&done)
        .unwrap_or_else(|_| panic!("no output; log: {}", net.machine.log()))
}

/// Shell keeps its own list, which has www.allowed.test.
fn shell_keeps_its_own_list(net: &Net) {
    let (status, text) = net.text(&format!(
        "curl -sS --max-time 20 --cacert {} https://www.allowed.test/s",
        net.ca().display()
    ));
    assert_eq!((status, text.trim()), (0, "hello www.allowed.test /s"));
}

/// status: the layer, the list, the traffic by host.
fn status_counts_the_runtimes_traffic_by_host(net: &Net) {
    let st = net.machine.client().status().unwrap();
    let layer = common::layer(&st, "runtime_network");
    assert!(layer.holds && layer.required, "{layer:?}");
    let proxy = st.proxy.unwrap();
    assert_eq!(proxy.runtime_hosts, Some(vec!["allowed.test".to_string()]));
    let traffic = proxy.runtime_traffic.unwrap();
    let own = traffic.iter().find(|t| t.host == "allowed.test").unwrap();
    // curl's request and node's tunnel.
    assert!(own.connections == 2 && own.bytes_down > 100, "{traffic:?}");
    let refused = traffic
        .iter()
        .find(|t| t.host == "www.allowed.test")
        .unwrap();
    assert_eq!(
        (refused.connections, refused.refused),
        (0, 1),
        "{traffic:?}"
    );
}

/// The egress lines say which list decided.
fn the_egress_lines_say_which_list_decided(net: &Net) {
    let lines = net.egress();
    let rt = lines
        .iter()
        .find(|l| l["host"] == "allowed.test" && l["list"] == "runtime_hosts");
    assert!(rt.is_some(), "{lines:?}");
    let no = lines
        .iter()
        .find(|l| l["host"] == "www.allowed.test" && l["allowed"] == false)
        .unwrap();
    assert!(
        no["reason"]
            .as_str()
            .unwrap()
            .contains("runtime's host list"),
        "{no}"
    );
}
