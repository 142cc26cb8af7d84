//! The user's own terminal, for `warden run -t` and `warden machine exec
//! -it`: its size (sent with the run, and again whenever it changes), and
//! raw mode while the command runs (every key goes to the command's
//! terminal as typed: Ctrl-C there becomes SIGINT for its foreground
//! group), restored however the run ends.

use crate::error::CliError;
use nix::sys::termios::{self, SetArg, Termios};
use std::os::fd::{AsFd, BorrowedFd};

/// The size a terminal that says 0x0 is taken to have (`script` makes
/// one so, before anyone sets its size).
pub const UNSIZED: (u16, u16) = (24, 80);

/// The size of the terminal on `fd` (`UNSIZED` where it says 0 rows or 0
/// columns), None when it is not one.
pub fn size(fd: BorrowedFd) -> Option<(u16, u16)> {
    let mut size: libc::winsize = libc::winsize {
        ws_row: 0,
        ws_col: 0,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCGWINSZ writes one winsize to the pointer we pass.
    let rc = unsafe {
        libc::ioctl(
            std::os::fd::AsRawFd::as_raw_fd(&fd),
            libc::TIOCGWINSZ,
            &mut size,
        )
    };
    (rc == 0).then_some(match (size.ws_row, size.ws_col) {
        (0, _) | (_, 0) => UNSIZED,
        sized => sized,
    })
}

/// The size of this process's terminal (stdin's, else stdout's).
pub fn own_size() -> Option<(u16, u16)> {
    size(std::io::stdin().as_fd()).or_else(|| size(std::io::stdout().as_fd()))
}

/// stdin in raw mode until dropped.
pub struct Raw {
    saved: Termios,
}

impl Raw {
    pub fn enter() -> Result<Raw, CliError> {
        let stdin = std::io::stdin();
        let saved = termios::tcgetattr(stdin.as_fd()).map_err(CliError::NotATerminal)?;
        let mut raw = saved.clone();
        termios::cfmakeraw(&mut raw);
        termios::tcsetattr(stdin.as_fd(), SetArg::TCSANOW, &raw).map_err(CliError::RawMode)?;
        Ok(Raw { saved })
    }
}

impl Drop for Raw {
    fn drop(&mut self) {
        let _ = termios::tcsetattr(std::io::stdin().as_fd(), SetArg::TCSANOW, &self.saved);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_terminal_of_0x0_is_taken_as_24x80_and_a_pipe_is_none() {
        let pty = nix::pty::openpty(None, None).unwrap();
        assert_eq!(size(pty.slave.as_fd()), Some(UNSIZED));
        let wide = libc::winsize {
            ws_row: 30,
            ws_col: 100,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        let pty = nix::pty::openpty(Some(&wide), None).unwrap();
        assert_eq!(size(pty.slave.as_fd()), Some((30, 100)));
        let (read, _write) = nix::unistd::pipe().unwrap();
        assert_eq!(size(read.as_fd()), None);
    }
}
