//! A minimal RESP2 client over a blocking TCP stream, for tests to poke a server without a Redis client crate.

use std::io::{self, BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// One reply from the server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// `+OK` and other simple strings.
    Status(String),
    /// `-ERR …` replies.
    Error(String),
    /// `:42`.
    Int(i64),
    /// `$…` bulk strings; `None` for the null bulk string.
    Bulk(Option<Vec<u8>>),
    /// `*…` arrays (`None`-arrays are returned as an empty array).
    Array(Vec<Reply>),
}

impl Reply {
    /// The integer, if this is one.
    pub fn as_int(&self) -> Option<i64> {
        match self {
            Reply::Int(i) => Some(*i),
            _ => None,
        }
    }

    /// The text of a status, error or bulk reply.
    pub fn as_text(&self) -> Option<String> {
        match self {
            Reply::Status(s) | Reply::Error(s) => Some(s.clone()),
            Reply::Bulk(Some(b)) => Some(String::from_utf8_lossy(b).into_owned()),
            _ => None,
        }
    }

    /// Whether this is an error reply.
    pub fn is_error(&self) -> bool {
        matches!(self, Reply::Error(_))
    }
}

/// Sends one command to `addr` on a fresh connection and reads its reply (bounded by `timeout`).
///
/// # Errors
/// I/O errors, including a timeout, and malformed replies.
pub fn command(addr: SocketAddr, args: &[&str], timeout: Duration) -> io::Result<Reply> {
    Connection::open(addr, timeout)?.command(args)
}

/// One blocking connection for many commands (for test workers that issue thousands).
#[derive(Debug)]
pub struct Connection {
    reader: BufReader<TcpStream>,
}

impl Connection {
    /// Connects with `timeout` as the bound on connecting and on each read and write.
    ///
    /// # Errors
    /// I/O errors.
    pub fn open(addr: SocketAddr, timeout: Duration) -> io::Result<Self> {
        let stream = TcpStream::connect_timeout(&addr, timeout)?;
        stream.set_read_timeout(Some(timeout))?;
        stream.set_write_timeout(Some(timeout))?;
        stream.set_nodelay(true)?;
        Ok(Connection { reader: BufReader::new(stream) })
    }

    /// Sends one command and reads its reply.
    ///
    /// # Errors
    /// I/O errors, including a timeout, and malformed replies.
    pub fn command(&mut self, args: &[&str]) -> io::Result<Reply> {
        let mut out = format!("*{}\r\n", args.len()).into_bytes();
        for arg in args {
            out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
            out.extend_from_slice(arg.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        self.reader.get_mut().write_all(&out)?;
        read_reply(&mut self.reader)
    }

    /// Reads the next reply the server sends unasked (a message on a channel this connection subscribed to).
    ///
    /// # Errors
    /// I/O errors, including a timeout (nothing came within the connection's bound), and malformed replies.
    pub fn read(&mut self) -> io::Result<Reply> {
        read_reply(&mut self.reader)
    }
}

fn bad(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("malformed RESP reply: {what}"))
}

fn read_reply<R: BufRead>(r: &mut R) -> io::Result<Reply> {
    let mut line = String::new();
    if r.read_line(&mut line)? == 0 {
        return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "connection closed"));
    }
    let line = line.trim_end_matches(['\r', '\n']);
    let (kind, rest) = line.split_at_checked(1).ok_or_else(|| bad("empty line"))?;
    let number = || rest.parse::<i64>().map_err(|_| bad(rest));
    Ok(match kind {
        "+" => Reply::Status(rest.to_owned()),
        "-" => Reply::Error(rest.to_owned()),
        ":" => Reply::Int(number()?),
        "$" => {
            let len = number()?;
            if len < 0 {
                Reply::Bulk(None)
            } else {
                let mut buf = vec![0; usize::try_from(len).map_err(|_| bad(rest))? + 2];
                r.read_exact(&mut buf)?;
                buf.truncate(buf.len() - 2);
                Reply::Bulk(Some(buf))
            }
        }
        "*" => {
            let n = number()?;
            let mut items = Vec::new();
            for _ in 0..n.max(0) {
                items.push(read_reply(r)?);
            }
            Reply::Array(items)
        }
        other => return Err(bad(other)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_nested_replies() {
        let raw = b"*3\r\n:1\r\n$3\r\nabc\r\n*2\r\n$-1\r\n+OK\r\n";
        let reply = read_reply(&mut &raw[..]).unwrap();
        assert_eq!(
            reply,
            Reply::Array(vec![
                Reply::Int(1),
                Reply::Bulk(Some(b"abc".to_vec())),
                Reply::Array(vec![Reply::Bulk(None), Reply::Status("OK".into())]),
            ])
        );
        assert_eq!(read_reply(&mut &b"-ERR x\r\n"[..]).unwrap().as_text().unwrap(), "ERR x");
    }
}
