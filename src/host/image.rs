//! The image a machine runs: as named, or built from its Dockerfile. A
//! build is redone when anything it is made of changed: the Dockerfile's
//! text, the image each `FROM` names (by the engine's id, so rebuilding
//! the base image rebuilds the agents' images), and the build context's
//! files (names, sizes, modes and times). The image a rebuild replaced is
//! removed once no container uses it.

use super::context_ignore::Ignore;
use super::definition::{Definition, Source};
use super::engine;
use super::error::LaunchError;
use super::kept;
use super::state::PREFIX;
use super::this_host::{Engine, Host};
use super::{sha256_hex, step};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The most files a build context may hold for its fingerprint.
const MAX_CONTEXT_FILES: usize = 200_000;

/// What `image` found or made.
pub struct Image {
    /// The name the container is made from.
    pub name: String,
    /// Built by this `up` (and not there before it): removed again if the
    /// `up` fails.
    pub made: bool,
    /// The engine's id of the image this build replaced, to remove once
    /// the container made from it is gone.
    pub replaced: Option<String>,
}

/// The machine's image: as named, or built when its inputs changed.
/// `store`: the engine's image list, as the last `up` recorded it.
pub fn image(
    def: &Definition,
    definition: &Path,
    state: &Path,
    store: Option<&Path>,
    start: Instant,
    host: &Host,
) -> Result<Image, LaunchError> {
    let dockerfile = match &def.source {
        Source::Image(name) => {
            return Ok(Image {
                name: name.clone(),
                made: false,
                replaced: None,
            })
        }
        Source::Dockerfile(path) => path,
    };
    let tag = format!("localhost/{PREFIX}-{}:latest", def.id);
    let text = std::fs::read(dockerfile).map_err(|e| {
        LaunchError::new(
            format!("dockerfile {}", dockerfile.display()),
            e.to_string(),
        )
    })?;
    let folder = dockerfile.parent().unwrap_or(Path::new("/"));
    let digest = inputs_digest(&text, folder, definition, store)?;
    let recorded = state.join("image.sha256");
    let before = image_id(store, &tag);
    let same = std::fs::read_to_string(&recorded).is_ok_and(|d| d.trim() == digest);
    if same && before.is_some() {
        step(
            start,
            &format!("image {tag}: Dockerfile, its FROM images and context unchanged"),
        );
        return Ok(Image {
            name: tag,
            made: false,
            replaced: None,
        });
    }
    match host.engine {
        Engine::Podman => {
            let ignore = build_ignore(folder, state)?;
            let args = podman_build_args(host, &tag, dockerfile, &ignore, folder);
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            engine::run("build image", &args)?;
        }
        Engine::Docker => docker_build(host, &tag, dockerfile, folder)?,
    }
    std::fs::write(&recorded, &digest).map_err(|e| LaunchError::io(&recorded, e))?;
    let after = image_id(None, &tag);
    step(start, &format!("image {tag}: built"));
    Ok(Image {
        name: tag,
        made: before.is_none(),
        replaced: before.filter(|old| Some(old) != after.as_ref()),
    })
}

/// Removes an image a rebuild replaced; one still used by a container of
/// another machine stays, and that is said.
pub fn remove_replaced(id: &str, start: Instant) {
    match engine::run("remove the replaced image", &["rmi", id]) {
        Ok(_) => step(start, &format!("old image {} removed", short(id))),
        Err(e) => step(start, &format!("old image {} kept: {e}", short(id))),
    }
}

fn short(id: &str) -> &str {
    let id = id.strip_prefix("sha256:").unwrap_or(id);
    &id[..id.len().min(12)]
}

/// The engine's id of an image, None when it has none by that name: read
/// from the engine's image list `store` when the last `up` recorded it and
/// it names the image exactly (`kept.rs`), asked of the engine otherwise.
pub fn image_id(store: Option<&Path>, name: &str) -> Option<String> {
    if let Some(id) = store.and_then(|store| kept::id_in(store, name)) {
        return Some(id);
    }
    engine::run(
        "image id",
        &["image", "inspect", "--format", "{{.Id}}", name],
    )
    .ok()
    .map(|s| s.trim().to_string())
}

/// The digest of everything a build is made of.
fn inputs_digest(
    dockerfile: &[u8],
    context: &Path,
    definition: &Path,
    store: Option<&Path>,
) -> Result<String, LaunchError> {
    let mut inputs = String::from_utf8_lossy(dockerfile).into_owned();
    for from in from_images(&String::from_utf8_lossy(dockerfile)) {
        // An image not here yet makes the build fail with the engine's
        // own words; the digest just records that it was missing.
        let id = image_id(store, &from).unwrap_or_else(|| "missing".into());
        inputs.push_str(&format!("\0FROM {from} {id}"));
    }
    inputs.push('\0');
    inputs.push_str(&context_fingerprint(context, definition)?);
    Ok(sha256_hex(inputs.as_bytes()))
}

/// Pure: the images a Dockerfile's `FROM` lines name, with `ARG` defaults
/// given before the first `FROM` substituted; build stages named by `AS`
/// and `scratch` are not images.
pub fn from_images(text: &str) -> Vec<String> {
    let mut args: Vec<(String, String)> = Vec::new();
    let mut stages: Vec<String> = Vec::new();
    let mut images: Vec<String> = Vec::new();
    for line in instructions(text) {
        let mut words = line.split_whitespace();
        let Some(keyword) = words.next() else {
            continue;
        };
        let rest: Vec<&str> = words.collect();
        if keyword.eq_ignore_ascii_case("ARG") && images.is_empty() && stages.is_empty() {
            for arg in rest {
                let (name, value) = arg.split_once('=').unwrap_or((arg, ""));
                args.push((name.to_string(), value.trim_matches('"').to_string()));
            }
        } else if keyword.eq_ignore_ascii_case("FROM") {
            let words: Vec<&str> = rest.into_iter().filter(|w| !w.starts_with("--")).collect();
            let Some(image) = words.first() else { continue };
            let image = substitute(image, &args);
            let is_stage = stages.iter().any(|s| s.eq_ignore_ascii_case(&image));
            if !is_stage && image != "scratch" && !images.contains(&image) {
                images.push(image);
            }
            if let [_, as_word, stage] = words[..] {
                if as_word.eq_ignore_ascii_case("as") {
                    stages.push(stage.to_ascii_lowercase());
                }
            }
        }
    }
    images
}

/// The Dockerfile's instructions: comments dropped, `\` continuations
/// joined.
fn instructions(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with('#') {
            continue;
        }
        match trimmed.strip_suffix('\\') {
            Some(part) => {
                current.push_str(part);
                current.push(' ');
            }
            None => {
                current.push_str(trimmed);
                out.push(std::mem::take(&mut current));
            }
        }
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

/// `${NAME}`, `${NAME:-default}` and `$NAME` from the ARG defaults.
fn substitute(word: &str, args: &[(String, String)]) -> String {
    let value = |name: &str, default: &str| {
        args.iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| default.to_string())
    };
    let mut out = String::new();
    let mut rest = word;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        rest = &rest[at + 1..];
        if let Some(inner) = rest.strip_prefix('{') {
            let Some(end) = inner.find('}') else {
                out.push('$');
                continue;
            };
            let (name, default) = inner[..end].split_once(":-").unwrap_or((&inner[..end], ""));
            out.push_str(&value(name, default));
            rest = &inner[end + 1..];
        } else {
            let end = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            out.push_str(&value(&rest[..end], ""));
            rest = &rest[end..];
        }
    }
    out.push_str(rest);
    out
}

/// Every file of the build context by name, size, mode and modification
/// time (not by content: cheap on a large project, and any edit changes
/// the time). `.env` files never reach an image and `.git` is not built
/// from, so neither counts; nor does what the context's ignore file
/// leaves out of a build (see `context_ignore`), nor `skip` (the machine's
/// definition, whose changes make the container again, not the image).
fn context_fingerprint(context: &Path, skip: &Path) -> Result<String, LaunchError> {
    use std::os::unix::fs::MetadataExt;
    let skip_id = std::fs::metadata(skip).ok().map(|m| (m.dev(), m.ino()));
    // None: no ignore file, or one read the safe way as leaving out nothing.
    let ignore = [".containerignore", ".dockerignore"]
        .iter()
        .find_map(|name| std::fs::read_to_string(context.join(name)).ok())
        .and_then(|text| Ignore::parse(&text));
    let mut entries: Vec<String> = Vec::new();
    let mut pending: Vec<PathBuf> = vec![context.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let listing = std::fs::read_dir(&dir).map_err(|e| {
            LaunchError::new(format!("build context {}", dir.display()), e.to_string())
        })?;
        for entry in listing.flatten() {
            let name = entry.file_name();
            if name == ".env" || name == ".git" {
                continue;
            }
            let path = entry.path();
            let relative = path.strip_prefix(context).unwrap_or(&path);
            let left_out = ignore
                .as_ref()
                .is_some_and(|i| i.leaves_out(&relative.to_string_lossy()));
            if left_out {
                continue;
            }
            let Ok(meta) = std::fs::symlink_metadata(&path) else {
                continue;
            };
            // The definition however it was named (relative, through links).
            if Some((meta.dev(), meta.ino())) == skip_id {
                continue;
            }
            entries.push(format!(
                "{}\0{}\0{:o}\0{}.{}",
                relative.display(),
                meta.len(),
                meta.mode(),
                meta.mtime(),
                meta.mtime_nsec()
            ));
            if entries.len() > MAX_CONTEXT_FILES {
                return Err(LaunchError::new(
                    format!("build context {}", context.display()),
                    format!("more than {MAX_CONTEXT_FILES} files; give the Dockerfile a folder of its own"),
                ));
            }
            if meta.is_dir() {
                pending.push(path);
            }
        }
    }
    entries.sort_unstable();
    Ok(sha256_hex(entries.join("\n").as_bytes()))
}

/// Pure: podman's build command; the ignore file (the context's own and
/// every `.env`) is an option of its own.
fn podman_build_args(
    host: &Host,
    tag: &str,
    dockerfile: &Path,
    ignore: &Path,
    context: &Path,
) -> Vec<String> {
    let mut args = vec![
        "build".to_string(),
        "-t".into(),
        tag.into(),
        "--pull=never".into(),
        "-f".into(),
        dockerfile.to_string_lossy().into_owned(),
        "--ignorefile".into(),
        ignore.to_string_lossy().into_owned(),
    ];
    args.extend(host.ulimits.iter().cloned());
    args.push(context.to_string_lossy().into_owned());
    args
}

/// Pure: Docker's build command, reading the context as a tar stream on
/// stdin. On a daemon without its bridge network (`--bridge=none`), `RUN`
/// steps use the host's network, or they would have none.
fn docker_build_args(
    host: &Host,
    tag: &str,
    dockerfile_in_context: &str,
    bridge: bool,
) -> Vec<String> {
    let mut args = vec![
        "build".to_string(),
        "-t".into(),
        tag.into(),
        "-f".into(),
        dockerfile_in_context.into(),
    ];
    if !bridge {
        args.push("--network=host".into());
    }
    args.extend(host.ulimits.iter().cloned());
    args.push("-".into());
    args
}

/// Docker: the context goes to the daemon as a tar stream made here, with
/// every `.env` left out, so the owner's keys never reach an image whatever
/// the client's builder (a legacy builder reads no ignore file beside the
/// Dockerfile); the daemon still applies the context's own
/// `.dockerignore`.
fn docker_build(
    host: &Host,
    tag: &str,
    dockerfile: &Path,
    context: &Path,
) -> Result<(), LaunchError> {
    use std::process::{Command, Stdio};
    let name = dockerfile
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .ok_or_else(|| {
            LaunchError::new(
                format!("dockerfile {}", dockerfile.display()),
                "no file name",
            )
        })?;
    let bridge = engine::has_bridge();
    let args = docker_build_args(host, tag, &name, bridge);
    let mut tar = Command::new("tar")
        .args(["-C"])
        .arg(context)
        .args(["--exclude=.env", "--exclude=./.git", "-cf", "-", "."])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| LaunchError::new("build image", format!("cannot run tar: {e}")))?;
    let stream = tar
        .stdout
        .take()
        .ok_or_else(|| LaunchError::new("build image", "tar gave no output"))?;
    let out = engine::command()?
        // The legacy builder, when the client has no BuildKit component:
        // the context is ours already.
        .env_remove("DOCKER_BUILDKIT")
        .args(&args)
        .stdin(Stdio::from(stream))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| LaunchError::new("build image", format!("cannot run docker: {e}")))?;
    let tar_out = tar
        .wait_with_output()
        .map_err(|e| LaunchError::new("build image", format!("tar: {e}")))?;
    if !tar_out.status.success() {
        return Err(LaunchError::new(
            "build image",
            format!(
                "tar of {} failed: {}",
                context.display(),
                String::from_utf8_lossy(&tar_out.stderr).trim()
            ),
        ));
    }
    if out.status.success() {
        return Ok(());
    }
    let (stderr, stdout) = (
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout),
    );
    Err(engine::failure(
        "build image",
        "docker",
        &out.status,
        &stderr,
        &stdout,
    ))
}

/// The build context's ignore file, kept in the state folder: the
/// context's own (.containerignore or .dockerignore), plus every `.env`,
/// so that a `COPY . .` never puts the owner's keys into an image.
fn build_ignore(context: &Path, state: &Path) -> Result<PathBuf, LaunchError> {
    let own = [".containerignore", ".dockerignore"]
        .iter()
        .find_map(|name| std::fs::read_to_string(context.join(name)).ok())
        .unwrap_or_default();
    let path = state.join("build.ignore");
    std::fs::write(&path, format!("{own}\n.env\n**/.env\n"))
        .map_err(|e| LaunchError::io(&path, e))?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn from_lines_table() {
        let cases: [(&str, &[&str]); 9] = [
            (
                "FROM localhost/warden-machine:latest\nRUN true\n",
                &["localhost/warden-machine:latest"],
            ),
            (
                "from debian:bookworm AS build\nFROM build\n",
                &["debian:bookworm"],
            ),
            (
                "FROM --platform=linux/amd64 a:1 AS x\nFROM x AS y\nFROM b:2\n",
                &["a:1", "b:2"],
            ),
            (
                "ARG SUITE=bookworm\nFROM localhost/warden-rootfs:${SUITE}\n",
                &["localhost/warden-rootfs:bookworm"],
            ),
            ("ARG T\nFROM img:${T:-latest}\n", &["img:latest"]),
            ("ARG B=\"base\"\nFROM $B\n", &["base"]),
            ("# FROM commented:out\nFROM \\\n  real:1\n", &["real:1"]),
            ("FROM scratch\nCOPY x /\n", &[]),
            ("FROM a\nFROM a\n", &["a"]),
        ];
        for (text, want) in cases {
            assert_eq!(from_images(text), want, "{text}");
        }
    }

    #[test]
    fn the_context_fingerprint_follows_files_but_not_keys() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.txt"), "1").unwrap();
        let first = context_fingerprint(dir.path(), Path::new("/nonexistent")).unwrap();
        assert_eq!(
            context_fingerprint(dir.path(), Path::new("/nonexistent")).unwrap(),
            first
        );
        std::fs::write(dir.path().join(".env"), "KEY=x").unwrap();
        assert_eq!(
            context_fingerprint(dir.path(), Path::new("/nonexistent")).unwrap(),
            first
        );
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("sub/b.txt"), "2").unwrap();
        let second = context_fingerprint(dir.path(), Path::new("/nonexistent")).unwrap();
        assert_ne!(second, first);
        std::fs::write(dir.path().join("sub/b.txt"), "22").unwrap();
        let third = context_fingerprint(dir.path(), Path::new("/nonexistent")).unwrap();
        assert_ne!(third, second);
        // What the ignore file leaves out, and the definition, do not count.
        std::fs::write(dir.path().join(".dockerignore"), "*.log\n").unwrap();
        let ignoring = context_fingerprint(dir.path(), Path::new("/nonexistent")).unwrap();
        std::fs::write(dir.path().join("up.log"), "progress").unwrap();
        let definition = dir.path().join("agent.json");
        std::fs::write(&definition, "{}").unwrap();
        assert_eq!(
            context_fingerprint(dir.path(), &definition).unwrap(),
            ignoring
        );
        // An ignore file read otherwise by the engine leaves nothing out.
        std::fs::write(dir.path().join(".dockerignore"), "*.log\n!keep.log\n").unwrap();
        assert_ne!(
            context_fingerprint(dir.path(), &definition).unwrap(),
            ignoring
        );
    }

    #[test]
    fn build_args_table() {
        let host = Host {
            engine: Engine::Docker,
            rootless: false,
            cgroups: super::super::this_host::Cgroups::Unified,
            global: vec![],
            ulimits: vec!["--ulimit".into(), "nofile=10:10".into()],
            facts: vec![],
        };
        let docker = docker_build_args(&host, "t:1", "Dockerfile", false);
        assert_eq!(
            docker,
            [
                "build",
                "-t",
                "t:1",
                "-f",
                "Dockerfile",
                "--network=host",
                "--ulimit",
                "nofile=10:10",
                "-"
            ]
        );
        assert!(!docker_build_args(&host, "t:1", "Dockerfile", true)
            .contains(&"--network=host".to_string()));
        let podman = podman_build_args(
            &host,
            "t:1",
            Path::new("/c/Dockerfile"),
            Path::new("/s/build.ignore"),
            Path::new("/c"),
        );
        assert_eq!(
            podman,
            [
                "build",
                "-t",
                "t:1",
                "--pull=never",
                "-f",
                "/c/Dockerfile",
                "--ignorefile",
                "/s/build.ignore",
                "--ulimit",
                "nofile=10:10",
                "/c"
            ]
        );
    }
}
