//! Whether a VM runs under KVM or QEMU's software emulation (TCG). KVM is
//! used only when `/dev/kvm` can run an ordinary guest kernel: the probe
//! gathers what it can see without running a guest, and a pure verdict
//! decides, saying why when it is software emulation.
//!
//! A `/dev/kvm` that answers is not enough: a paravirtual KVM (such as
//! kvm_pvm, in a cloud VM without nested virtualisation) answers every
//! ioctl but runs only guest kernels made for it, and booting an ordinary
//! kernel there may hang. So KVM needs, besides the device and its API
//! version, hardware virtualisation (vmx or svm in /proc/cpuinfo) and the
//! matching module (kvm_intel or kvm_amd) holding `/dev/kvm`; only then is
//! a VM made (KVM_CREATE_VM) to prove the device takes one.

use std::os::fd::AsRawFd;
use std::path::Path;

/// The API version every KVM has answered since Linux 2.6.22.
const KVM_API_VERSION: i32 = 12;
/// `_IO(KVMIO, 0x00)` and `_IO(KVMIO, 0x01)`, KVMIO being 0xAE.
const KVM_GET_API_VERSION: libc::c_ulong = 0xAE00;
const KVM_CREATE_VM: libc::c_ulong = 0xAE01;

/// How QEMU runs the guest's CPUs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Accel {
    Kvm,
    /// Software emulation, and why KVM is not used.
    Tcg(String),
}

impl Accel {
    /// One plain line for `up`.
    pub fn line(&self) -> String {
        match self {
            Accel::Kvm => "acceleration: KVM (/dev/kvm runs guests here)".into(),
            Accel::Tcg(why) => format!("acceleration: none, software emulation (TCG): {why}"),
        }
    }
}

/// What the probe saw of `/dev/kvm` and the CPU; a step not reached is None.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KvmProbe {
    /// /dev/kvm opened for reading and writing, or why not.
    pub device: Option<Result<(), String>>,
    /// KVM_GET_API_VERSION's answer, or its error.
    pub api_version: Option<Result<i32, String>>,
    /// vmx or svm among the CPU's flags.
    pub hardware: Option<bool>,
    /// The kvm modules loaded (/sys/module/kvm_*): kvm_intel, kvm_amd,
    /// kvm_pvm...
    pub modules: Vec<String>,
    /// KVM_CREATE_VM's outcome, tried only when everything else said yes.
    pub create_vm: Option<Result<(), String>>,
}

/// Pure: KVM when every step of the probe said yes, else software
/// emulation with the first reason it did not.
pub fn verdict(probe: &KvmProbe) -> Accel {
    let no = |why: String| Accel::Tcg(why);
    match &probe.device {
        None => return no("/dev/kvm was not probed".into()),
        Some(Err(e)) => return no(format!("/dev/kvm cannot be opened ({e})")),
        Some(Ok(())) => {}
    }
    match &probe.api_version {
        Some(Ok(KVM_API_VERSION)) => {}
        Some(Ok(v)) => {
            return no(format!(
                "/dev/kvm answers API version {v}, not {KVM_API_VERSION}"
            ))
        }
        Some(Err(e)) => return no(format!("/dev/kvm refuses KVM_GET_API_VERSION ({e})")),
        None => return no("/dev/kvm's API version was not asked".into()),
    }
    let modules = match probe.modules.is_empty() {
        true => "no kvm module".to_string(),
        false => probe.modules.join(", "),
    };
    if probe.hardware != Some(true) {
        return no(format!(
            "the CPU offers no hardware virtualisation (no vmx or svm in /proc/cpuinfo); /dev/kvm here is {modules}, which cannot run an ordinary guest kernel"
        ));
    }
    if !probe
        .modules
        .iter()
        .any(|m| m == "kvm_intel" || m == "kvm_amd")
    {
        return no(format!(
            "/dev/kvm is not kvm_intel's or kvm_amd's ({modules})"
        ));
    }
    match &probe.create_vm {
        Some(Ok(())) => Accel::Kvm,
        Some(Err(e)) => no(format!("/dev/kvm refuses KVM_CREATE_VM ({e})")),
        None => no("KVM_CREATE_VM was not tried".into()),
    }
}

/// Probes this host, step by step, stopping at the first no. A VM is made
/// (and closed at once) only when the device, its version, the CPU and
/// the module all said yes; no vCPU is made and no guest code runs.
pub fn probe() -> KvmProbe {
    let mut probe = KvmProbe::default();
    let device = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm");
    let device = match device {
        Ok(device) => device,
        Err(e) => {
            probe.device = Some(Err(e.to_string()));
            return probe;
        }
    };
    probe.device = Some(Ok(()));
    // SAFETY: KVM_GET_API_VERSION takes no argument and only returns a
    // number; the descriptor is open for the whole call.
    let version = unsafe { libc::ioctl(device.as_raw_fd(), KVM_GET_API_VERSION, 0) };
    probe.api_version = Some(match version {
        v if v < 0 => Err(std::io::Error::last_os_error().to_string()),
        v => Ok(v),
    });
    if probe.api_version != Some(Ok(KVM_API_VERSION)) {
        return probe;
    }
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    probe.hardware = Some(hardware_virtualisation(&cpuinfo));
    probe.modules = kvm_modules(Path::new("/sys/module"));
    if verdict(&KvmProbe {
        create_vm: Some(Ok(())),
        ..probe.clone()
    }) != Accel::Kvm
    {
        return probe;
    }
    // SAFETY: KVM_CREATE_VM takes the machine type (0, the default) and
    // returns a new descriptor, owned here and closed at once.
    let vm = unsafe { libc::ioctl(device.as_raw_fd(), KVM_CREATE_VM, 0) };
    probe.create_vm = Some(match vm {
        fd if fd < 0 => Err(std::io::Error::last_os_error().to_string()),
        fd => {
            // SAFETY: `fd` was just returned by the kernel and is owned by
            // nothing else.
            drop(unsafe { <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(fd) });
            Ok(())
        }
    });
    probe
}

/// Pure: whether the CPU's flags (/proc/cpuinfo) hold vmx or svm.
pub fn hardware_virtualisation(cpuinfo: &str) -> bool {
    cpuinfo
        .lines()
        .filter(|l| l.starts_with("flags"))
        .filter_map(|l| l.split_once(':'))
        .any(|(_, flags)| flags.split_whitespace().any(|f| f == "vmx" || f == "svm"))
}

/// The kvm modules loaded (names under `sys_module` beginning `kvm_`).
fn kvm_modules(sys_module: &Path) -> Vec<String> {
    let mut found: Vec<String> = std::fs::read_dir(sys_module)
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|name| name.starts_with("kvm_"))
                .collect()
        })
        .unwrap_or_default();
    found.sort();
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn yes() -> KvmProbe {
        KvmProbe {
            device: Some(Ok(())),
            api_version: Some(Ok(12)),
            hardware: Some(true),
            modules: vec!["kvm_intel".into()],
            create_vm: Some(Ok(())),
        }
    }

    /// (probe, None for KVM or what the reason for TCG says)
    fn device_and_api_probes() -> Vec<(KvmProbe, Option<&'static str>)> {
        vec![
            (yes(), None),
            (
                KvmProbe {
                    modules: vec!["kvm_amd".into()],
                    ..yes()
                },
                None,
            ),
            (KvmProbe::default(), Some("not probed")),
            (
                KvmProbe {
                    device: Some(Err("No such file or directory (os error 2)".into())),
                    ..Default::default()
                },
                Some("/dev/kvm cannot be opened (No such file"),
            ),
            (
                KvmProbe {
                    api_version: Some(Ok(11)),
                    ..yes()
                },
                Some("API version 11, not 12"),
            ),
            (
                KvmProbe {
                    api_version: Some(Err("Inappropriate ioctl".into())),
                    ..yes()
                },
                Some("refuses KVM_GET_API_VERSION"),
            ),
        ]
    }

    fn module_and_vm_probes() -> Vec<(KvmProbe, Option<&'static str>)> {
        vec![
            // This host: a paravirtual KVM in a cloud VM.
            (
                KvmProbe {
                    hardware: Some(false),
                    modules: vec!["kvm_pvm".into()],
                    create_vm: None,
                    ..yes()
                },
                Some("no vmx or svm in /proc/cpuinfo); /dev/kvm here is kvm_pvm"),
            ),
            (
                KvmProbe {
                    modules: vec!["kvm_pvm".into()],
                    create_vm: None,
                    ..yes()
                },
                Some("not kvm_intel's or kvm_amd's (kvm_pvm)"),
            ),
            (
                KvmProbe {
                    modules: vec![],
                    ..yes()
                },
                Some("(no kvm module)"),
            ),
            (
                KvmProbe {
                    create_vm: Some(Err("Cannot allocate memory".into())),
                    ..yes()
                },
                Some("refuses KVM_CREATE_VM (Cannot allocate memory)"),
            ),
            (
                KvmProbe {
                    create_vm: None,
                    ..yes()
                },
                Some("KVM_CREATE_VM was not tried"),
            ),
        ]
    }

    #[test]
    fn kvm_only_when_every_step_says_yes() {
        let table: Vec<(KvmProbe, Option<&str>)> =
            [device_and_api_probes(), module_and_vm_probes()].concat();
        for (probe, want) in table {
            match (verdict(&probe), want) {
                (Accel::Kvm, None) => {}
                (Accel::Tcg(why), Some(want)) => assert!(why.contains(want), "{why} / {want}"),
                (got, want) => panic!("{probe:?}: {got:?}, wanted {want:?}"),
            }
        }
        assert_eq!(
            Accel::Tcg("x".into()).line(),
            "acceleration: none, software emulation (TCG): x"
        );
    }

    #[test]
    fn cpu_flags_are_read_from_cpuinfo() {
        let table = [
            ("flags\t\t: fpu vme de pse vmx sse\n", true),
            ("flags\t\t: fpu svm\n", true),
            ("flags\t\t: fpu hypervisor lm\n", false),
            ("model name : vmx inside a name\nflags : fpu\n", false),
            ("", false),
        ];
        for (text, want) in table {
            assert_eq!(hardware_virtualisation(text), want, "{text:?}");
        }
    }

    /// The probe on this host is only read, never acted on here: whatever
    /// it finds, a verdict of KVM needs every step to have said yes.
    #[test]
    fn the_probe_agrees_with_its_verdict() {
        let probe = probe();
        let accel = verdict(&probe);
        match &accel {
            Accel::Kvm => {
                assert_eq!(probe.hardware, Some(true));
                assert_eq!(probe.create_vm, Some(Ok(())));
            }
            Accel::Tcg(why) => {
                assert!(!why.is_empty());
                assert_ne!(probe.create_vm, Some(Ok(())), "{why}");
            }
        }
        eprintln!("{}", accel.line());
    }
}
