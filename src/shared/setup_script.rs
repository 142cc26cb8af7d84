//! How the owner's setup runs, the same wherever it is started: by the
//! launcher through the engine (a container's `up`), or by warden for the
//! host's `run_setup` (a VM). The folder it runs in and the script that
//! runs it.

/// The folder, under the runtime's data, where the owner's setup runs.
pub const SETUP_FOLDER: &str = ".setup";

/// The sh script that runs the owner's setup (read on stdin) in `$1`: a
/// folder made fresh (0700, the runtime's alone, inside its 0700 data) and
/// removed after, never the workspace, where shell makes folders: a setup's
/// `python3 -m venv`, `npx` or `make` reads its working folder first, and
/// would run what shell planted there as the runtime, keys in hand.
/// PYTHONSAFEPATH keeps Python from putting that folder on its path at all.
pub const SETUP_SCRIPT: &str = r#"d=$1
rm -rf -- "$d" && mkdir -m 700 -- "$d" && cd -- "$d" || exit 125
PYTHONSAFEPATH=1 sh -s
s=$?
cd / && rm -rf -- "$d"
exit "$s""#;
