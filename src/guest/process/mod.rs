//! The machine's processes as PID 1 keeps them, whoever they are for:
//! every child reaped in one place (`reaper`), a process's status read as
//! the kernel writes it (`proc_status`), every process of `shell` found and
//! stopped (`shell_procs`), and each command's processes tagged so that
//! they end with it (`lifetime`).

pub mod lifetime;
pub mod proc_status;
pub mod reaper;
pub mod shell_procs;
