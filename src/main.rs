//! The `warden` command: dispatches subcommands, nothing more.

#[path = "main/asked.rs"]
mod asked;
#[path = "main/audit_cli.rs"]
mod audit_cli;
#[path = "main/card_cli.rs"]
mod card_cli;
#[path = "main/describe.rs"]
mod describe;
#[path = "main/error.rs"]
mod error;
#[path = "main/machine_cli.rs"]
mod machine_cli;
#[path = "main/sessions.rs"]
mod sessions;
#[path = "main/target.rs"]
mod target;
#[path = "main/terminal.rs"]
mod terminal;
#[path = "main/tunnel.rs"]
mod tunnel;
use describe::describe;
use error::CliError;
use machine_cli::machine;
use target::Target;

use clap::{Parser, Subcommand};
use sessions::{attach, follow_size, list_commands, print_output};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use warden::wire::client::{Client, Message};
use warden::wire::{Event, Kind, Request, RunRequest, StdinMode};

const DEFAULT_SOCKET: &str = "/run/warden/api.sock";

#[derive(Parser)]
#[command(
    name = "warden",
    version,
    about = "In-guest security supervisor for AI coding agents"
)]
struct Cli {
    /// The machine's key, for a host socket (run, status, reload) or a
    /// TCP door (`machine exec/status/audit --connect`).
    #[arg(long, global = true, env = "WARDEN_KEY_FILE")]
    key_file: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

/// The key read from --key-file, for every connection this process makes.
static KEY: std::sync::OnceLock<String> = std::sync::OnceLock::new();

#[derive(Subcommand)]
enum Command {
    /// Boot as the machine's PID 1 (or a subreaper): set up the users and
    /// layout, serve the API, run MAIN as the runtime user.
    Init {
        /// The machine config (JSON) [default: /etc/warden/machine.json]
        #[arg(long)]
        config: Option<PathBuf>,
        /// The machine's main process, run as the runtime user.
        #[arg(last = true)]
        main: Vec<String>,
    },
    #[command(about = RUN_ABOUT)]
    Run(RunArgs),
    /// Check or read an audit log (works on a copy, anywhere).
    Audit {
        #[command(subcommand)]
        action: AuditAction,
    },
    /// Have warden read its network policy (network.json), its commands'
    /// limits (limits.json) and its idle stop (machine.json) again now; the
    /// proxy also notices a changed network.json by itself.
    Reload {
        #[arg(long, env = "WARDEN_SOCKET", default_value = DEFAULT_SOCKET)]
        socket: PathBuf,
    },
    /// Say, as the runtime, that the machine is ready: `warden machine up`
    /// and `--start` wait for it where the definition says `ready: "runtime"`.
    Ready {
        #[arg(long, env = "WARDEN_SOCKET", default_value = DEFAULT_SOCKET)]
        socket: PathBuf,
    },
    /// Run only the egress proxy, in the foreground (to measure or debug
    /// it; inside a machine, `init` runs it).
    Proxy {
        /// A loopback address to listen on (repeatable).
        #[arg(long, default_value = "127.0.0.1:3128")]
        listen: Vec<std::net::SocketAddr>,
        /// The folder holding network.json.
        #[arg(long, default_value = warden::shared::policy::DEFAULT_DIR)]
        policy_dir: PathBuf,
        /// Write decisions to an audit log in this folder, not stdout.
        #[arg(long)]
        audit_dir: Option<PathBuf>,
        /// Open the hosts network.json gives credentials or rules, as a
        /// machine's warden does, with an authority made for this run:
        /// its certificate (PEM) is written to this file, for clients to
        /// trust. Without it such hosts are refused (`cannot_open`).
        #[arg(long)]
        opened_ca: Option<PathBuf>,
        /// The credentials' values for opened hosts, a `.env` text (as a
        /// machine's `credentials_from`).
        #[arg(long, requires = "opened_ca")]
        credentials: Option<PathBuf>,
    },
    /// One TCP connection to HOST:PORT through the egress proxy, on stdin
    /// and stdout (ssh's ProxyCommand: git over ssh to a listed host:22).
    Connect {
        host: String,
        port: u16,
        /// The proxy's address (default: from https_proxy, else
        /// 127.0.0.1:3128).
        #[arg(long)]
        proxy: Option<String>,
    },
    /// Make, run and remove agent machines with podman (rootful or
    /// rootless) or Docker.
    ///
    /// The engine and this host's quirks are found at start; the owner may
    /// set them: WARDEN_ENGINE (podman, docker), WARDEN_OCI_RUNTIME,
    /// WARDEN_CGROUP_MANAGER.
    Machine {
        #[command(subcommand)]
        action: MachineAction,
    },
    /// Show warden's status.
    Status {
        #[arg(long, env = "WARDEN_SOCKET", default_value = DEFAULT_SOCKET)]
        socket: PathBuf,
        /// Print the status as JSON.
        #[arg(long)]
        json: bool,
    },
    /// List the detached commands (running, or lately ended).
    Commands {
        #[arg(long, env = "WARDEN_SOCKET", default_value = DEFAULT_SOCKET)]
        socket: PathBuf,
    },
    /// Follow a detached command: what it printed, then live, then its
    /// exit status (Ctrl-C leaves it running).
    Attach {
        #[arg(long, env = "WARDEN_SOCKET", default_value = DEFAULT_SOCKET)]
        socket: PathBuf,
        command: u64,
    },
}

/// What `warden run` does, for the whole command line's help and its own.
const RUN_ABOUT: &str = "Run a command as the shell user through warden's API, streaming its output; exits with its status (128+n for a signal)";
/// What `warden machine exec` does, likewise.
const EXEC_ABOUT: &str = "Run ARGV as the shell user through the machine's warden";

/// `warden run`'s arguments.
#[derive(clap::Args)]
struct RunArgs {
    #[arg(long, env = "WARDEN_SOCKET", default_value = DEFAULT_SOCKET)]
    socket: PathBuf,
    #[command(flatten)]
    command: CommandArgs,
}

/// `warden machine exec`'s arguments.
#[derive(clap::Args)]
struct ExecArgs {
    #[command(flatten)]
    target: Target,
    /// Start the machine first when it is stopped.
    #[arg(long)]
    start: bool,
    #[command(flatten)]
    command: CommandArgs,
}

/// One subcommand's arguments alone, with the key file any connection
/// may need, parsed without the other subcommands (see `parse`).
#[derive(Parser)]
struct Alone<A: clap::Args> {
    #[arg(long, env = "WARDEN_KEY_FILE")]
    key_file: Option<PathBuf>,
    #[command(flatten)]
    args: A,
}

impl<A: clap::Args> Alone<A> {
    /// `rest`: the arguments after the subcommand's name.
    fn try_parse(
        name: &'static str,
        about: &'static str,
        rest: &[std::ffi::OsString],
    ) -> Result<Alone<A>, clap::Error> {
        use clap::{CommandFactory, FromArgMatches};
        let args = std::iter::once(std::ffi::OsString::from(name)).chain(rest.iter().cloned());
        let mut matches = Self::command()
            .name(name)
            .about(about)
            .try_get_matches_from(args)?;
        Self::from_arg_matches_mut(&mut matches)
    }
}

/// The command line. `run` and `machine exec`, which a runtime may call
/// thousands of times, parse only their own arguments: building every
/// subcommand's parser first cost a client about 40 page faults more, of
/// heap and stack (141 in all, against 41 for an empty Rust program).
fn parse() -> Cli {
    parse_from(std::env::args_os().collect()).unwrap_or_else(|e| e.exit())
}

fn parse_from(args: Vec<std::ffi::OsString>) -> Result<Cli, clap::Error> {
    let word = |i: usize| args.get(i).and_then(|a| a.to_str());
    Ok(match (word(1), word(2)) {
        (Some("run"), _) => {
            let only = Alone::<RunArgs>::try_parse("warden run", RUN_ABOUT, &args[2..])?;
            Cli {
                key_file: only.key_file,
                command: Command::Run(only.args),
            }
        }
        (Some("machine"), Some("exec")) => {
            let only = Alone::<ExecArgs>::try_parse("warden machine exec", EXEC_ABOUT, &args[3..])?;
            Cli {
                key_file: only.key_file,
                command: Command::Machine {
                    action: MachineAction::Exec(only.args),
                },
            }
        }
        _ => Cli::try_parse_from(args)?,
    })
}

/// One command for shell, as `warden run` and `warden machine exec` take it.
#[derive(clap::Args)]
struct CommandArgs {
    /// A folder under the workspace (made if missing), the one place the
    /// command may write besides /tmp; default: shell's home.
    #[arg(long)]
    folder: Option<String>,
    /// Kill the command after this many seconds.
    #[arg(long)]
    timeout: Option<f64>,
    /// Add NAME=VALUE to the command's clean environment.
    #[arg(long = "env", value_name = "NAME=VALUE")]
    env: Vec<String>,
    /// Run this line with /bin/sh -c instead of ARGV.
    #[arg(long, conflicts_with = "argv")]
    shell: Option<String>,
    /// Send this process's stdin to the command.
    #[arg(short, long)]
    interactive: bool,
    /// Run it on a terminal of this terminal's size (raw keys in, resized
    /// with this one), as `podman exec -t` does.
    #[arg(short = 't', long)]
    tty: bool,
    /// Leave the command's background processes running after it exits.
    #[arg(long)]
    keep_background: bool,
    /// Let the command outlive this connection (see `commands`, `attach`).
    #[arg(long)]
    detach: bool,
    /// A name for a detached command.
    #[arg(long, requires = "detach")]
    tag: Option<String>,
    /// The program and its arguments (found in PATH when it has no '/').
    #[arg(last = true)]
    argv: Vec<String>,
}

impl CommandArgs {
    fn request(self) -> Result<RunRequest, CliError> {
        Ok(RunRequest {
            argv: (!self.argv.is_empty()).then_some(self.argv),
            shell: self.shell,
            folder: self.folder,
            stdin: if self.interactive {
                StdinMode::Pipe
            } else {
                StdinMode::Null
            },
            env: parse_env(&self.env)?,
            timeout_ms: self.timeout.map(|s| (s * 1000.0).ceil() as u64),
            keep_background: self.keep_background,
            limits: None,
            detach: self.detach,
            tag: self.tag,
            pty: match self.tty {
                false => None,
                true => {
                    let (rows, cols) = crate::terminal::own_size().ok_or(CliError::NoTerminal)?;
                    Some(warden::wire::PtySize { rows, cols })
                }
            },
        })
    }
}

#[derive(Subcommand)]
enum AuditAction {
    /// Check the hash chain; report the first break precisely. Several
    /// files are checked as one chain, in the order given; a folder means
    /// all its log files (set-aside ones, then the current one).
    Verify {
        #[arg(default_value = DEFAULT_AUDIT_DIR)]
        files: Vec<PathBuf>,
        /// A file on the host keeping the last line verified: the log must
        /// still hold it (else it was cut or replaced); rewritten after a
        /// good check.
        #[arg(long)]
        anchor: Option<PathBuf>,
        /// Accept lines rotated away since the anchor (by default a gap
        /// after the anchor fails: unread evidence was lost).
        #[arg(long)]
        allow_gap: bool,
    },
    /// Print the log for people.
    Tail {
        #[arg(default_value = DEFAULT_AUDIT)]
        file: PathBuf,
        /// Keep printing lines as they are written.
        #[arg(short, long)]
        follow: bool,
        /// Only events of this kind (e.g. command_start).
        #[arg(long)]
        kind: Option<String>,
        /// How many of the last lines to print first.
        #[arg(short = 'n', long, default_value_t = 20)]
        lines: usize,
    },
}

#[derive(Subcommand)]
enum MachineAction {
    /// Make (or reuse) and start the machine a definition describes.
    Up {
        definition: PathBuf,
        /// The owner's secrets [default: .env next to the definition].
        #[arg(long)]
        env_file: Option<PathBuf>,
        /// Make it a micro-VM under QEMU (as `"kind": "vm"` does).
        #[arg(long)]
        vm: bool,
        /// Run the setup script even when it ran with these inputs.
        #[arg(long)]
        setup: bool,
        /// Keep N machines of this definition made ahead and stopped: take
        /// one (named `<id>-<k>`, printed) and make what the pool lacks in
        /// the background; 0 empties the pool. Containers only.
        #[arg(long, value_name = "N")]
        warm: Option<usize>,
        /// With --warm: the spares wait frozen, their memory held (a take
        /// is a thaw), rather than stopped (a take is a start).
        #[arg(long, requires = "warm")]
        paused: bool,
        /// With --warm: only fill the pool (what `up --warm` starts).
        #[arg(long, hide = true, requires = "warm")]
        fill: bool,
    },
    /// Print the Kubernetes manifests of a definition (a Pod, or with
    /// --sandbox an agent-sandbox Sandbox, with its Secrets, ConfigMap and
    /// claims), for a cluster's baseline Pod Security Standard; see
    /// docs/kubernetes.md.
    Kube {
        definition: PathBuf,
        /// The owner's secrets [default: .env next to the definition].
        #[arg(long)]
        env_file: Option<PathBuf>,
        /// An agent-sandbox Sandbox (agents.x-k8s.io/v1alpha1), not a Pod.
        #[arg(long)]
        sandbox: bool,
        /// The pod's RuntimeClass (a VM's, such as Kata Containers).
        #[arg(long, value_name = "NAME")]
        runtime_class: Option<String>,
    },
    /// A VM's host side: its egress relay and its published ports
    /// (started by `up`; see docs/threat-model.md).
    #[command(hide = true)]
    VmRelay {
        #[arg(long)]
        config: PathBuf,
    },
    /// Say what this host offers machines (engine, rootless or not,
    /// cgroups, runtime, limits, state folder), or why it cannot run one.
    Check,
    /// List this user's machines: id, kind (container or vm), engine,
    /// owner's uid, state, idle time (`-` when stopped), image and
    /// published ports.
    Ps {
        /// Print them as a JSON array, a field per column.
        #[arg(long)]
        json: bool,
    },
    #[command(about = EXEC_ABOUT)]
    Exec(ExecArgs),
    /// Show the machine's warden status (and its published ports).
    Status {
        #[command(flatten)]
        target: Target,
        #[arg(long)]
        json: bool,
        /// Start the machine first when it is stopped.
        #[arg(long)]
        start: bool,
    },
    /// List the machine's detached commands.
    Commands { id: String },
    /// Follow one of the machine's detached commands to its end.
    Attach { id: String, command: u64 },
    /// Stop the machine (SIGTERM, SIGKILL after 10 s).
    Stop { id: String },
    /// Take the machine down when its agent is done: stop it and remove
    /// its container (a VM: power it off and remove its files), keeping
    /// its volumes or disks, workspace, state folder and image for the
    /// next `up`.
    Down { id: String },
    /// Front the ports of this owner's machines whose definitions say
    /// "serve": hold them while the machines sleep, start (or thaw) one at
    /// the first connection, put one to sleep after its idle time, start
    /// one ahead of its runtime's next job. One per owner; `up` starts it
    /// when none runs.
    Serve {
        /// How long before a job its machine is started, in seconds.
        #[arg(long, default_value_t = 120)]
        lead: u64,
    },
    /// Print the machine's container log.
    Logs { id: String },
    /// Remove the machine's container (and with --volumes its volumes and
    /// state folder).
    Rm {
        id: String,
        #[arg(long)]
        volumes: bool,
    },
    /// Remove every machine, volume and state folder of this user.
    Prune,
    /// Copy the machine's audit log out (read through its warden while it
    /// runs, from its disk or volume when it is stopped), verify it
    /// against the host's anchor and print its last lines.
    Audit {
        #[command(flatten)]
        target: Target,
        /// Accept lines rotated away since the last check.
        #[arg(long)]
        allow_gap: bool,
        /// With --connect: the anchor file to check the log against (and
        /// move on); a machine of this host keeps its own.
        #[arg(long)]
        anchor: Option<PathBuf>,
    },
    /// A run's card: its spend against its budget (per model), its
    /// commands, the hosts it reached and was refused, from the audit log.
    Card(card_cli::CardArgs),
}

const DEFAULT_AUDIT: &str = "/home/runtime/data/audit/warden.jsonl";
const DEFAULT_AUDIT_DIR: &str = "/home/runtime/data/audit";

fn main() {
    // The kernel starts a VM's /init with no arguments: that is `init`.
    if std::process::id() == 1 && std::env::args_os().len() == 1 {
        std::process::exit(warden::guest::boot::run(warden::guest::boot::InitArgs {
            config: None,
            main: Vec::new(),
        }));
    }
    let cli = parse();
    // The key is read before any command runs: every connection uses it.
    if let Some(path) = &cli.key_file {
        read_key(path);
    }
    if only_prints(&cli.command) {
        end_quietly_on_closed_pipe();
    }
    std::process::exit(dispatch(cli.command));
}

/// Keeps the key in `path` for this process's connections, or fails.
fn read_key(path: &Path) {
    match std::fs::read_to_string(path) {
        Ok(key) => {
            let _ = KEY.set(key.trim().to_string());
        }
        Err(e) => fail(&format!("key file {}: {e}", path.display())),
    }
}

/// Whether `command` only prints (feeds no other program).
fn only_prints(command: &Command) -> bool {
    matches!(
        command,
        Command::Status { .. }
            | Command::Audit { .. }
            | Command::Machine {
                action: MachineAction::Audit { .. }
                    | MachineAction::Status { .. }
                    | MachineAction::Ps { .. }
                    | MachineAction::Logs { .. }
                    | MachineAction::Kube { .. }
            }
    )
}

/// A reader that stops early (`| head`) ends a command that only prints
/// quietly, as it ends any Unix tool, instead of failing a write and
/// panicking. (Commands that feed other programs, like `machine up`
/// writing to the engine's stdin, keep SIGPIPE ignored so that such a
/// failure is reported.) Called before any thread is started.
fn end_quietly_on_closed_pipe() {
    // SAFETY: signal(2) with SIG_DFL, before any thread is started.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// Runs the subcommand; returns the process's exit status.
fn dispatch(command: Command) -> i32 {
    match command {
        Command::Init { config, main } => {
            warden::guest::boot::run(warden::guest::boot::InitArgs { config, main })
        }
        Command::Run(RunArgs { socket, command }) => command
            .request()
            .and_then(|request| run(&socket, request))
            .unwrap_or_else(|e| fail(&e.to_string())),
        Command::Status { socket, json } => {
            asked::status(&socket, json).unwrap_or_else(|e| fail(&e.to_string()))
        }
        Command::Commands { socket } => connect(&socket)
            .and_then(list_commands)
            .unwrap_or_else(|e| fail(&e.to_string())),
        Command::Attach { socket, command } => connect(&socket)
            .and_then(|c| attach(c, command))
            .unwrap_or_else(|e| fail(&e.to_string())),
        Command::Reload { socket } => {
            asked::reload(&socket).unwrap_or_else(|e| fail(&e.to_string()))
        }
        Command::Ready { socket } => asked::ready(&socket).unwrap_or_else(|e| fail(&e.to_string())),
        Command::Machine { action } => machine(action).unwrap_or_else(|e| fail(&e.to_string())),
        Command::Connect { host, port, proxy } => {
            let proxy =
                proxy.unwrap_or_else(|| crate::tunnel::proxy_from(|name| std::env::var(name).ok()));
            match crate::tunnel::run(&host, port, &proxy) {
                Ok(()) => 0,
                Err(e) => fail(&format!("connect {host}:{port}: {e}")),
            }
        }
        Command::Proxy {
            listen,
            policy_dir,
            audit_dir,
            opened_ca,
            credentials,
        } => warden::guest::net::standalone(
            &listen,
            &policy_dir,
            audit_dir.as_deref(),
            opened_ca.as_deref().map(|ca| (ca, credentials.as_deref())),
        ),
        Command::Audit {
            action:
                AuditAction::Verify {
                    files,
                    anchor,
                    allow_gap,
                },
        } => audit_cli::verify(&files, anchor.as_deref(), allow_gap),
        Command::Audit {
            action:
                AuditAction::Tail {
                    file,
                    follow,
                    kind,
                    lines,
                },
        } => audit_cli::tail(&file, follow, kind.as_deref(), lines)
            .unwrap_or_else(|e| fail(&e.to_string())),
    }
}

fn fail(message: &str) -> ! {
    eprintln!("warden: {message}");
    std::process::exit(125);
}

fn parse_env(items: &[String]) -> Result<std::collections::BTreeMap<String, String>, CliError> {
    items
        .iter()
        .map(|item| match item.split_once('=') {
            Some((k, v)) => Ok((k.to_string(), v.to_string())),
            None => Err(CliError::Env(item.clone())),
        })
        .collect()
}

fn connect(socket: &Path) -> Result<Client, CliError> {
    Client::connect_keyed(socket, KEY.get().map(String::as_str), None).map_err(|source| {
        CliError::Socket {
            path: socket.into(),
            source,
        }
    })
}

fn run(socket: &Path, request: RunRequest) -> Result<i32, CliError> {
    let key = KEY.get().map(String::as_str);
    run_on(request, |first| {
        Client::connect_keyed(socket, key, first).map_err(|source| CliError::Socket {
            path: socket.into(),
            source,
        })
    })
}

/// Runs `request` on the client `connect` makes (the request rides in the
/// hello), streaming its output; returns its exit status.
fn run_on(
    request: RunRequest,
    connect: impl FnOnce(Option<(u32, &Request)>) -> Result<Client, CliError>,
) -> Result<i32, CliError> {
    const ID: u32 = 1;
    let on_terminal = request.pty.is_some();
    let pipe_stdin = request.stdin == StdinMode::Pipe || on_terminal;
    // Raw only once the run is sent, and restored however it ends.
    let mut client = connect(Some((ID, &Request::Run(request))))?;
    let _raw = match on_terminal {
        true => Some(crate::terminal::Raw::enter()?),
        false => None,
    };
    if on_terminal {
        follow_size(client.sender(), ID);
    }
    if pipe_stdin {
        let sender = client.sender();
        std::thread::spawn(move || {
            let mut stdin = std::io::stdin().lock();
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                match stdin.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        if sender.frame(Kind::Stdin, ID, &buf[..n]).is_err() {
                            return;
                        }
                    }
                }
            }
            let _ = sender.frame(Kind::Stdin, ID, &[]);
        });
    }
    let mut stdout = std::io::stdout().lock();
    loop {
        match client.receive()? {
            Message::Output(kind, _, bytes) => {
                if !print_output(kind, &bytes, &mut stdout) {
                    return Ok(141);
                }
            }
            Message::Event(_, Event::Detached { command, pid, tag }) => {
                let tag = tag.map(|t| format!(" {t:?}")).unwrap_or_default();
                println!("detached: command {command}{tag}, pid {pid} (`warden attach {command}`)");
                return Ok(0);
            }
            Message::Event(_, Event::Exit(report)) => {
                let _ = stdout.flush();
                if let Some(error) = &report.error {
                    eprintln!("warden: {error}");
                }
                if let Some(limit) = &report.limit {
                    eprintln!("warden: command stopped: {limit} limit reached");
                }
                return Ok(report.status);
            }
            Message::Event(id, Event::Error { code, message }) if id == ID => {
                return Err(CliError::Refused { code, message });
            }
            // A request of our own beside the run (a resize) was refused:
            // said, and the run goes on (a lost connection ends it above).
            Message::Event(_, Event::Error { code, message }) => {
                eprintln!("warden: {code:?}: {message}");
            }
            Message::Event(..) => {}
        }
    }
}

#[cfg(test)]
#[path = "main/cli_tests.rs"]
mod tests;
