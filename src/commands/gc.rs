//! `vidcurate gc RUN`: parses, runs `store::gc::gc` and prints what it removed.

use crate::error::RunError;
use crate::store::gc::{gc, parse_age};

/// Remove leftovers no reader uses: partial downloads, temp files of a crashed writer,
/// incomplete multipart uploads on S3 (a worker killed while it uploaded media), and with
/// --superseded the shards of old settings set aside in RUN/_superseded/. Committed shards are
/// never touched. Run with --dry-run first to see the list.
#[derive(clap::Args)]
pub struct Args {
    /// A run directory or object-store URL (s3://bucket/prefix, …).
    pub run: String,
    /// Only what is at least this old (30m, 2h, 7d): younger leftovers may belong to a worker
    /// that is committing right now.
    #[arg(long, default_value = "1h", value_parser = parse_age)]
    pub older_than: std::time::Duration,
    /// Also remove shards of superseded settings (RUN/_superseded/).
    #[arg(long)]
    pub superseded: bool,
    /// Print what would be removed, remove nothing.
    #[arg(long)]
    pub dry_run: bool,
}

pub fn run(a: Args) -> Result<crate::error::Exit, RunError> {
    let store = crate::store::open_run(&a.run, crate::store::Access::Read)
        .map_err(|e| RunError::at(a.run.clone(), e))?;
    let r = crate::runtime::tokio_runtime()?.block_on(gc(
        store.as_ref(),
        a.older_than,
        a.superseded,
        a.dry_run,
    ))?;
    let verb = if a.dry_run { "would remove" } else { "removed" };
    for (path, size) in &r.removed {
        println!("{verb} {path} ({size} bytes)");
    }
    let abort = if a.dry_run { "would abort" } else { "aborted" };
    for u in &r.aborted {
        let begun = chrono::DateTime::<chrono::Utc>::from(u.initiated)
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        println!(
            "{abort} incomplete upload of {} (begun {begun}, upload id {})",
            u.path, u.id
        );
    }
    let bytes: u64 = r.removed.iter().map(|(_, s)| s).sum();
    println!(
        "{verb} {} objects, {bytes} bytes; kept {} younger than {}s",
        r.removed.len(),
        r.young,
        a.older_than.as_secs()
    );
    match &r.uploads_not_listed {
        Some(why) => println!("incomplete uploads not listed: {why}"),
        None if !r.uploads_listed => {}
        None => println!(
            "{abort} {} incomplete uploads; kept {} younger than {}s",
            r.aborted.len(),
            r.young_uploads,
            a.older_than.as_secs()
        ),
    }
    Ok(crate::error::Exit::Done)
}
