//! Two thin stream wrappers for an opened host's TLS: the client's stream
//! with the bytes it sent before its tunnel was answered put back in
//! front, and an upstream whose writes are capped (a VM's vsock carries at
//! most a page per write).

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// `inner`, read after `front`.
pub struct Prefixed<S> {
    front: Vec<u8>,
    at: usize,
    inner: S,
}

impl<S> Prefixed<S> {
    pub fn new(front: Vec<u8>, inner: S) -> Prefixed<S> {
        Prefixed {
            front,
            at: 0,
            inner,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Prefixed<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.at < self.front.len() {
            let n = buf.remaining().min(self.front.len() - self.at);
            let at = self.at;
            buf.put_slice(&self.front[at..at + n]);
            self.at += n;
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Prefixed<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn the_front_is_read_first_and_writes_are_capped() {
        let (a, mut b) = tokio::io::duplex(64);
        b.write_all(b" world").await.unwrap();
        drop(b);
        let mut read = Prefixed::new(b"hello".to_vec(), a);
        let mut all = String::new();
        read.read_to_string(&mut all).await.unwrap();
        assert_eq!(all, "hello world");

        let (a, _b) = tokio::io::duplex(64);
        let mut capped = crate::guest::vm::vsock::Capped::new(a, 3);
        assert_eq!(capped.write(b"abcdef").await.unwrap(), 3);
    }
}
