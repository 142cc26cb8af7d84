//! A VM's disks and initramfs: the root disk made once per image from the
//! engine's export, the machine's initramfs (the kit's, with the machine's
//! own files appended), and its volumes copied sparse from the kit.

use super::{dir, lend_tag, Kit};
use crate::host::definition::{Definition, Lend, LendMode};
use crate::host::engine;
use crate::host::error::LaunchError;
use crate::host::state::{key, state_dir};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

pub(super) const VOLUMES: [&str; 2] = ["data.ext4", "workspace.ext4"];

pub(super) fn copy_sparse(from: &Path, to: &Path) -> Result<(), LaunchError> {
    let out = Command::new("cp")
        .arg("--sparse=always")
        .args([from, to])
        .output()
        .map_err(|e| LaunchError::new("cp", e.to_string()))?;
    match out.status.success() {
        true => Ok(()),
        false => Err(LaunchError::new(
            format!("copy {}", from.display()),
            String::from_utf8_lossy(&out.stderr).trim(),
        )),
    }
}

/// The root disk of `image` (its name and the engine's id): made once per
/// image id (its file system tree, exported by the engine, into ext4 with
/// `mkfs.ext4 -d`).
pub(super) fn rootfs(kit: &Kit, (image, id): (&str, &str)) -> Result<PathBuf, LaunchError> {
    let id = id.trim_start_matches("sha256:");
    let short = &id[..id.len().min(16)];
    // Root's alone: a disk holds the whole image, which the engine's own
    // storage keeps from other users too.
    let images = kit.dir.join("images");
    std::fs::DirBuilder::new()
        .mode(0o700)
        .recursive(true)
        .create(&images)
        .map_err(|e| LaunchError::io(&images, e))?;
    std::fs::set_permissions(&images, std::fs::Permissions::from_mode(0o700))
        .map_err(|e| LaunchError::io(&images, e))?;
    let disk = images.join(format!("{short}.ext4"));
    if disk.exists() {
        return Ok(disk);
    }
    let tree = tempfile::Builder::new()
        .prefix("warden-rootfs-")
        .tempdir_in(&images)
        .map_err(|e| LaunchError::io(&images, e))?;
    let container = engine::run("export image", &["create", image, "true"])?;
    let container = container.trim().to_string();
    let exported = Command::new("sh")
        .arg("-c")
        .arg(r#""$0" export "$1" | tar -x -C "$2" --numeric-owner"#)
        .arg(engine::host()?.engine.program())
        .args([&container, &tree.path().display().to_string()])
        .output();
    let _ = engine::run("export image", &["rm", "-f", &container]);
    let exported =
        exported.map_err(|e| LaunchError::new(format!("export {image}"), e.to_string()))?;
    if !exported.status.success() {
        return Err(LaunchError::new(
            format!("export {image}"),
            String::from_utf8_lossy(&exported.stderr).trim(),
        ));
    }
    // Two `up`s of one image each make their own, and the last rename wins.
    let partial = tree.path().with_extension("ext4");
    let made = Command::new("mkfs.ext4")
        .args(["-q", "-F", "-L", "root", "-d"])
        .arg(tree.path())
        .arg(&partial)
        .arg("2G")
        .output()
        .map_err(|e| LaunchError::new("mkfs.ext4 (apt-get install e2fsprogs)", e.to_string()))?;
    if !made.status.success() {
        let _ = std::fs::remove_file(&partial);
        return Err(LaunchError::new(
            format!("mkfs.ext4 {}", partial.display()),
            String::from_utf8_lossy(&made.stderr).trim(),
        ));
    }
    std::fs::rename(&partial, &disk).map_err(|e| LaunchError::io(&disk, e))?;
    prune_disks(&images);
    Ok(disk)
}

/// Removes the root disks of images the engine no longer holds: each is
/// 2 GB of sparse file, and a rebuilt image would otherwise leave its old
/// disk behind for ever. A running VM keeps its open disk (`snapshot=on`
/// reads it through the descriptor QEMU already holds). Best effort: a
/// failure here never fails `up`.
fn prune_disks(images: &Path) {
    let Ok(held) = engine::run("image ids", &["images", "--quiet", "--no-trunc"]) else {
        return;
    };
    let Ok(entries) = std::fs::read_dir(images) else {
        return;
    };
    let names: Vec<String> = entries
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    for name in stale_disks(&names, &held) {
        let _ = std::fs::remove_file(images.join(name));
    }
}

/// Of the files in the disks' folder, the finished disks (`<16 hex>.ext4`)
/// whose id begins no image id in `held` (the engine's `images --quiet
/// --no-trunc`, one `sha256:<hex>` a line). Anything else is left alone.
fn stale_disks<'a>(names: &'a [String], held: &str) -> Vec<&'a str> {
    let held: Vec<&str> = held
        .lines()
        .map(|l| l.trim().trim_start_matches("sha256:"))
        .filter(|l| !l.is_empty())
        .collect();
    names
        .iter()
        .map(String::as_str)
        .filter(|name| {
            name.strip_suffix(".ext4").is_some_and(|short| {
                short.len() == 16
                    && short.bytes().all(|b| b.is_ascii_hexdigit())
                    && !held.iter().any(|id| id.starts_with(short))
            })
        })
        .collect()
}

/// The kit's initramfs with the machine's own files appended as a second
/// cpio archive (the kernel unpacks both): its key, config and policy, and
/// the runtime's keys, all root's; warden moves them onto the root disk.
pub(super) fn initrd(kit: &Kit, def: &Definition, keys_text: &str) -> Result<(), LaunchError> {
    let id = &def.id;
    let vm = dir(id);
    let state = state_dir(id);
    let stage = tempfile::Builder::new()
        .prefix("stage-")
        .tempdir_in(&vm)
        .map_err(|e| LaunchError::io(&vm, e))?;
    let etc = stage.path().join("etc/warden");
    std::fs::create_dir_all(etc.join("policy")).map_err(|e| LaunchError::io(&etc, e))?;
    let key = key(id)?;
    let config = vm_config(&state, def)?;
    let mut files: Vec<(PathBuf, Vec<u8>, u32)> = vec![
        (etc.join("key"), key.into_bytes(), 0o600),
        (
            etc.join("machine.json"),
            format!("{config:#}\n").into_bytes(),
            0o600,
        ),
    ];
    if !keys_text.is_empty() {
        files.push((
            etc.join("runtime.env"),
            keys_text.as_bytes().to_vec(),
            0o600,
        ));
    }
    let policy = state.join("etc/policy");
    for entry in std::fs::read_dir(&policy).map_err(|e| LaunchError::io(&policy, e))? {
        let entry = entry.map_err(|e| LaunchError::io(&policy, e))?;
        let bytes = std::fs::read(entry.path()).map_err(|e| LaunchError::io(&entry.path(), e))?;
        files.push((etc.join("policy").join(entry.file_name()), bytes, 0o600));
    }
    for (path, bytes, mode) in files {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&path)
            .map_err(|e| LaunchError::io(&path, e))?;
        f.write_all(&bytes).map_err(|e| LaunchError::io(&path, e))?;
    }
    let initrd = vm.join("initrd.gz");
    let partial = vm.join("initrd.gz.partial");
    let _ = std::fs::remove_file(&partial);
    let mut out = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&partial)
        .map_err(|e| LaunchError::io(&partial, e))?;
    let base = kit.dir.join("initrd.gz");
    std::fs::File::open(&base)
        .and_then(|mut f| std::io::copy(&mut f, &mut out))
        .map_err(|e| LaunchError::io(&base, e))?;
    drop(out);
    let packed = Command::new("sh")
        .arg("-c")
        .arg(r#"cd "$0" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc -R 0:0 --quiet | gzip >> "$1""#)
        .arg(stage.path())
        .arg(&partial)
        .output()
        .map_err(|e| LaunchError::new("cpio", e.to_string()))?;
    if !packed.status.success() {
        let _ = std::fs::remove_file(&partial);
        return Err(LaunchError::new(
            "initramfs",
            format!(
                "{} (apt-get install cpio)",
                String::from_utf8_lossy(&packed.stderr).trim()
            ),
        ));
    }
    std::fs::set_permissions(&partial, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| LaunchError::io(&partial, e))?;
    std::fs::rename(&partial, &initrd).map_err(|e| LaunchError::io(&initrd, e))
}

/// The VM's machine config: the one written for the machine, without the
/// host socket (a VM's warden serves the host over vsock instead), with
/// the lent folders' shares for warden to mount and the definition's `env`
/// for the main process (a container's engine sets it in warden's own).
fn vm_config(state: &Path, def: &Definition) -> Result<serde_json::Value, LaunchError> {
    let path = state.join("etc/machine.json");
    let text = std::fs::read_to_string(&path).map_err(|e| LaunchError::io(&path, e))?;
    let mut config: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| LaunchError::new(path.display().to_string(), e.to_string()))?;
    if let Some(fields) = config.as_object_mut() {
        fields.remove("host_socket");
        fields.insert("key_file".into(), "/etc/warden/key".into());
        fields.insert("vm_lends".into(), vm_lends(&def.lend));
        fields.insert("main_env".into(), serde_json::json!(def.env));
        let ports: Vec<u16> = def.ports.iter().map(|p| p.port).collect();
        fields.insert("vm_ports".into(), serde_json::json!(ports));
        // No engine restarts a VM: its warden starts the main process again.
        fields.insert("main_restart".into(), serde_json::json!(def.restart));
    }
    Ok(config)
}

/// Pure: the config's `vm_lends`, one per lend, tagged as QEMU's shares are.
pub(super) fn vm_lends(lends: &[Lend]) -> serde_json::Value {
    lends
        .iter()
        .enumerate()
        .map(|(i, lend)| {
            serde_json::json!({
                "tag": lend_tag(i),
                "at": lend.at,
                "read_only": lend.mode == LendMode::Read,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_finished_disks_of_images_gone_are_stale() {
        let held = "sha256:0123456789abcdef00\n\nfedcba9876543210ff\n";
        let cases: [(&str, bool); 7] = [
            ("0123456789abcdef.ext4", false),
            ("fedcba9876543210.ext4", false),
            ("aaaaaaaaaaaaaaaa.ext4", true),
            ("aaaaaaaaaaaaaaaa", false),
            ("warden-rootfs-x1.ext4", false),
            ("0123.ext4", false),
            (".lock", false),
        ];
        for (name, stale) in cases {
            let names = vec![name.to_string()];
            assert_eq!(!stale_disks(&names, held).is_empty(), stale, "{name}");
        }
    }

    use super::*;

    #[test]
    fn the_guest_is_told_each_share_and_where_it_goes() {
        let lends = [
            Lend {
                host: "/home/me/src".into(),
                at: "/lent/src".into(),
                mode: LendMode::Read,
            },
            Lend {
                host: "/home/me/out".into(),
                at: "/home/me/out".into(),
                mode: LendMode::Write,
            },
        ];
        let value = vm_lends(&lends);
        assert_eq!(
            value,
            serde_json::json!([
                {"tag": "lend0", "at": "/lent/src", "read_only": true},
                {"tag": "lend1", "at": "/home/me/out", "read_only": false},
            ])
        );
        // What the launcher writes, warden reads.
        let config = serde_json::json!({ "vm_lends": value }).to_string();
        let parsed = crate::shared::config::MachineConfig::parse(&config).unwrap();
        assert_eq!(parsed.vm_lends.len(), 2);
        assert!(parsed.vm_lends[0].read_only);
        assert_eq!(parsed.vm_lends[1].at, std::path::Path::new("/home/me/out"));
    }
}
