//! The in-memory store's script engine: lock-core's Lua scripts run as Redis runs them (Lua 5.1, `KEYS`, `ARGV`,
//! `redis.call`, `redis.pcall`, `redis.error_reply`, `redis.status_reply`, `redis.sha1hex`, Redis's conversion rules), over a
//! [`Keyspace`] instead of a server. A new primitive's scripts therefore need no in-memory twin.

use std::collections::HashMap;
use std::time::Instant;

use mlua::{Function, Lua, LuaOptions, MultiValue, StdLib, Table, Value};

use super::keyspace::{CommandResult, Keyspace};
use crate::seam::transport::{Reply, Script};

/// The instant every command of the running script sees (Redis, too, freezes key expiry during a script).
struct ScriptClock(Instant);

/// A Lua state that owns the keyspace, and the scripts compiled so far.
pub(crate) struct Engine {
    lua: Lua,
    compiled: HashMap<&'static str, Function>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine").field("compiled", &self.compiled.len()).finish_non_exhaustive()
    }
}

/// The message of a Lua error: what the script or a `redis.call` raised, without mlua's wrapping.
fn message(err: &mlua::Error) -> String {
    match err {
        mlua::Error::CallbackError { cause, .. } => message(cause),
        mlua::Error::RuntimeError(msg) => msg.clone(),
        other => other.to_string(),
    }
}

fn lua_error(err: mlua::Error) -> String {
    format!("ERR in-memory script engine: {}", message(&err))
}

/// A `redis.call` argument as Redis reads it: a string, or a number in its shortest decimal form.
fn argument(value: &Value) -> Result<Vec<u8>, String> {
    match value {
        Value::String(s) => Ok(s.as_bytes().to_vec()),
        Value::Integer(n) => Ok(n.to_string().into_bytes()),
        // Integral doubles below 2^53 print as integers; anything else as Rust prints the double.
        Value::Number(n) if n.fract() == 0.0 && n.abs() < 9.007_199_254_740_992e15 => {
            Ok(format!("{n:.0}").into_bytes())
        }
        Value::Number(n) => Ok(n.to_string().into_bytes()),
        _ => Err("ERR Lua redis lib command arguments must be strings or integers".to_owned()),
    }
}

/// A command's reply as a script sees it (Redis's conversion: nil → false, status → `{ok=…}`, …).
fn to_lua(lua: &Lua, reply: Reply) -> mlua::Result<Value> {
    Ok(match reply {
        Reply::Nil => Value::Boolean(false),
        Reply::Int(n) => Value::Integer(n),
        Reply::Bulk(bytes) => Value::String(lua.create_string(bytes)?),
        Reply::Status(text) => {
            let table = lua.create_table()?;
            table.set("ok", text)?;
            Value::Table(table)
        }
        Reply::Array(items) => {
            let table = lua.create_table()?;
            for (i, item) in items.into_iter().enumerate() {
                table.raw_set(i + 1, to_lua(lua, item)?)?;
            }
            Value::Table(table)
        }
    })
}

fn error_table(lua: &Lua, message: &str) -> mlua::Result<Value> {
    let table = lua.create_table()?;
    table.set("err", message)?;
    Ok(Value::Table(table))
}

/// A script's return value as a client sees it (Redis's conversion: numbers truncated to integers, false → nil,
/// true → 1, `{err=…}` → an error, `{ok=…}` → a status, a table → an array up to its first nil).
fn from_lua(value: Value) -> CommandResult {
    Ok(match value {
        Value::Nil | Value::Boolean(false) => Reply::Nil,
        Value::Boolean(true) => Reply::Int(1),
        Value::Integer(n) => Reply::Int(n),
        // Truncation towards zero, as Redis converts a Lua number.
        #[allow(clippy::cast_possible_truncation)]
        Value::Number(n) => Reply::Int(n as i64),
        Value::String(s) => Reply::Bulk(s.as_bytes().to_vec()),
        Value::Table(table) => {
            if let Ok(Value::String(err)) = table.raw_get::<Value>("err") {
                return Err(err.to_string_lossy());
            }
            if let Ok(Value::String(ok)) = table.raw_get::<Value>("ok") {
                return Ok(Reply::Status(ok.to_string_lossy()));
            }
            let mut items = Vec::new();
            for i in 1.. {
                match table.raw_get::<Value>(i) {
                    Ok(Value::Nil) | Err(_) => break,
                    Ok(item) => items.push(from_lua(item)?),
                }
            }
            Reply::Array(items)
        }
        Value::Error(err) => return Err(message(&err)),
        _ => Reply::Nil,
    })
}

/// Runs one `redis.call`/`redis.pcall` on the keyspace the Lua state owns.
fn command(lua: &Lua, args: &MultiValue) -> mlua::Result<CommandResult> {
    let args = match args.iter().map(argument).collect::<Result<Vec<_>, _>>() {
        Ok(args) => args,
        Err(err) => return Ok(Err(err)),
    };
    let now = lua.app_data_ref::<ScriptClock>().map_or_else(Instant::now, |clock| clock.0);
    let mut keyspace = lua
        .app_data_mut::<Keyspace>()
        .ok_or_else(|| mlua::Error::RuntimeError("ERR the in-memory keyspace is missing".to_owned()))?;
    Ok(keyspace.exec(&args, now))
}

impl Engine {
    /// A Lua state with the libraries Redis gives scripts, the `redis` table, and an empty keyspace.
    pub(crate) fn new() -> mlua::Result<Self> {
        let lua = Lua::new_with(StdLib::TABLE | StdLib::STRING | StdLib::MATH, LuaOptions::default())?;
        lua.set_app_data(Keyspace::default());
        let redis = lua.create_table()?;
        redis.set(
            "call",
            lua.create_function(|lua, args: MultiValue| match command(lua, &args)? {
                Ok(reply) => to_lua(lua, reply),
                Err(err) => Err(mlua::Error::RuntimeError(err)),
            })?,
        )?;
        redis.set(
            "pcall",
            lua.create_function(|lua, args: MultiValue| match command(lua, &args)? {
                Ok(reply) => to_lua(lua, reply),
                Err(err) => error_table(lua, &err),
            })?,
        )?;
        redis.set("error_reply", lua.create_function(|lua, msg: String| error_table(lua, &msg))?)?;
        redis.set(
            "sha1hex",
            lua.create_function(|_, text: mlua::LuaString| {
                Ok(sha1_smol::Sha1::from(text.as_bytes()).digest().to_string())
            })?,
        )?;
        redis.set(
            "status_reply",
            lua.create_function(|lua, msg: String| {
                let table = lua.create_table()?;
                table.set("ok", msg)?;
                Ok(table)
            })?,
        )?;
        // The release of Redis whose commands the keyspace answers (7.0.0; Redis sets this field from 7.0 on, and
        // scripts read it to choose `SET … GET` over a `GET` and a `SET`).
        redis.set("REDIS_VERSION_NUM", 0x0007_0000)?;
        redis.set("REDIS_VERSION", "7.0.0")?;
        lua.globals().set("redis", redis)?;
        Ok(Engine { lua, compiled: HashMap::new() })
    }

    /// The keyspace, for plain commands and the store's inspection methods.
    pub(crate) fn with_keyspace<T>(&self, f: impl FnOnce(&mut Keyspace) -> T) -> Option<T> {
        self.lua.app_data_mut::<Keyspace>().map(|mut keyspace| f(&mut keyspace))
    }

    /// Runs `script` with `keys` and `args` at `now`, as `EVAL` would.
    pub(crate) fn eval(
        &mut self,
        script: &'static Script,
        keys: &[&str],
        args: &[&str],
        now: Instant,
    ) -> CommandResult {
        let function = match self.compiled.get(script.sha1()) {
            Some(function) => function.clone(),
            None => {
                let function =
                    self.lua.load(script.body()).set_name(script.name()).into_function().map_err(lua_error)?;
                self.compiled.insert(script.sha1(), function.clone());
                function
            }
        };
        let table = |items: &[&str]| -> mlua::Result<Table> {
            let table = self.lua.create_table()?;
            for (i, item) in items.iter().enumerate() {
                table.raw_set(i + 1, *item)?;
            }
            Ok(table)
        };
        let globals = self.lua.globals();
        globals.set("KEYS", table(keys).map_err(lua_error)?).map_err(lua_error)?;
        globals.set("ARGV", table(args).map_err(lua_error)?).map_err(lua_error)?;
        self.lua.set_app_data(ScriptClock(now));
        let result = function.call::<Value>(());
        self.lua.remove_app_data::<ScriptClock>();
        match result {
            Ok(value) => from_lua(value),
            Err(err) => Err(message(&err)),
        }
    }
}
