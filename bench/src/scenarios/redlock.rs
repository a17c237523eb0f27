//! Scenario 4: Redlock over 3 and 5 servers, uncontended cycles on fresh keys, against the same lock on one
//! server, the floor doing the same fan-out concurrently, and rslock's multi-server mode.

use super::{cycle_scenario, Ctx};
use crate::contender::{Backend, Contender};
use crate::measure::Bound;
use crate::server::Server;

pub(crate) async fn run(ctx: &mut Ctx) -> anyhow::Result<()> {
    for n in [3, 5] {
        let servers = ctx.servers(n)?;
        let urls: Vec<String> = servers.iter().map(Server::url).collect();
        let mut contenders = vec![
            Contender::core("redis-rs-redlock", Backend::RedisRs, &urls, true).await?,
            Contender::core("fred-redlock", Backend::Fred, &urls, true).await?,
            Contender::floor("floor-fanout", &urls).await?,
            Contender::rslock("rslock", &urls, None)?,
            // The same backend on the first server alone: what the fan-out costs.
            Contender::core("redis-rs-single", Backend::RedisRs, &urls[..1], true).await?,
            // Not a target: Redlock with fencing writes the fence back in a second round trip; this shows its share.
            Contender::core("redis-rs-redlock-nofence", Backend::RedisRs, &urls, false).await?,
        ];
        ctx.settings.keep(&mut contenders);
        let bound = Bound::new(0.4, 1_000_000, ctx.settings.scale);
        cycle_scenario(ctx, &format!("redlock-{n}"), &servers, &contenders, 1, bound).await?;
    }
    Ok(())
}
