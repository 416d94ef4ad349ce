//! This machine's limits that a lab compares its collectives with: what one
//! core copies per second (the bound of a shared-memory transport that copies
//! each byte once), and what one TCP connection over loopback carries.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::time::Instant;

/// Single-thread copy bandwidth of `bytes` bytes: the median of 5 copies, GB/s.
pub fn memcpy_gbps(bytes: usize) -> f64 {
    let src = vec![1u8; bytes];
    let mut dst = vec![0u8; bytes];
    let rates = (0..5)
        .map(|_| {
            let t0 = Instant::now();
            dst.copy_from_slice(std::hint::black_box(&src));
            std::hint::black_box(&dst);
            bytes as f64 / t0.elapsed().as_secs_f64() / 1e9
        })
        .collect();
    median(rates)
}

/// One loopback TCP connection's bandwidth for `bytes` bytes, sent from a
/// second thread: the median of 3 transfers, GB/s. An error when this host
/// cannot listen on 127.0.0.1.
pub fn loopback_tcp_gbps(bytes: usize) -> std::io::Result<f64> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
    let addr = listener.local_addr()?;
    let sender = std::thread::spawn(move || -> std::io::Result<()> {
        let mut s = TcpStream::connect(addr)?;
        s.set_nodelay(true)?;
        let chunk = vec![7u8; 1 << 20];
        let mut ack = [0u8; 1];
        for _ in 0..3 {
            let mut left = bytes;
            while left > 0 {
                let n = left.min(chunk.len());
                s.write_all(&chunk[..n])?;
                left -= n;
            }
            s.read_exact(&mut ack)?;
        }
        Ok(())
    });
    let (mut r, _) = listener.accept()?;
    let mut buf = vec![0u8; 1 << 20];
    let mut rates = Vec::new();
    for _ in 0..3 {
        let t0 = Instant::now();
        let mut got = 0;
        while got < bytes {
            let n = r.read(&mut buf)?;
            if n == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            got += n;
        }
        rates.push(bytes as f64 / t0.elapsed().as_secs_f64() / 1e9);
        r.write_all(&[1])?;
    }
    sender
        .join()
        .map_err(|_| std::io::Error::other("the sending thread panicked"))??;
    Ok(median(rates))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_limits_measure_a_positive_rate() {
        assert!(memcpy_gbps(1 << 20) > 0.0);
        assert!(loopback_tcp_gbps(4 << 20).unwrap() > 0.0);
    }
}
