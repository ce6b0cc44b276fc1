//! A connection URL that names several hosts, as libpq writes them
//! (`postgres://user@db1:5432,db2:5432/app?target_session_attrs=read-write`): one URL per host,
//! in the order given, each with the rest of the original. sqlx reads one host per URL, so
//! the list is split here; which of them is the primary is decided by connecting
//! (see `failover`).

/// The parameter libpq uses to say which server of several to use; pgflow needs the primary.
const TARGET_PARAMETER: &str = "target_session_attrs";
/// The values of it that mean the primary.
const PRIMARY_TARGETS: [&str; 2] = ["read-write", "primary"];

/// The URL of each host `url` names, in order: `url` alone when it names one, without
/// `target_session_attrs` (which only a URL of several hosts may give, as `read-write` or
/// `primary`: pgflow always connects to the primary). The error says what to change.
pub(crate) fn split_hosts(url: &str) -> Result<Vec<String>, String> {
    let (url, target) = take_target(url);
    let Some((scheme, rest)) = url.split_once("://") else {
        return Ok(vec![url]);
    };
    // The hosts run from after the user (the last `@` before the path) to the path or query.
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let (user, hosts) = match authority.rfind('@') {
        Some(at) => authority.split_at(at + 1),
        None => ("", authority),
    };
    let hosts: Vec<&str> = hosts.split(',').collect();
    if let Some(target) = target
        && !PRIMARY_TARGETS.contains(&target.as_str())
    {
        return Err(format!(
            "`{TARGET_PARAMETER}={target}` is not supported: pgflow writes, so it connects to \
             the primary; use `{TARGET_PARAMETER}=read-write` or leave it out"
        ));
    }
    if hosts.iter().any(|host| host.trim().is_empty()) {
        return Err(
            "an empty host in the URL's list of hosts; write them as host1:port1,host2:port2"
                .to_owned(),
        );
    }
    Ok(hosts
        .iter()
        .map(|host| format!("{scheme}://{user}{host}{tail}"))
        .collect())
}

/// `url` without its `target_session_attrs` parameter, and that parameter's value.
fn take_target(url: &str) -> (String, Option<String>) {
    let Some((base, query)) = url.split_once('?') else {
        return (url.to_owned(), None);
    };
    let mut target = None;
    let kept: Vec<&str> = query
        .split('&')
        .filter(|pair| match pair.split_once('=') {
            Some((key, value)) if key == TARGET_PARAMETER => {
                target = Some(value.to_owned());
                false
            }
            _ => !pair.is_empty(),
        })
        .collect();
    if kept.is_empty() {
        (base.to_owned(), target)
    } else {
        (format!("{base}?{}", kept.join("&")), target)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_host_is_the_url_as_given() {
        let url = "postgres://app:secret@db.internal:5433/app?sslmode=require";
        assert_eq!(split_hosts(url).unwrap(), [url]);
    }

    #[test]
    fn several_hosts_are_one_url_each_in_order() {
        let hosts = split_hosts(
            "postgres://app:p%40ss@db1:5432,db2,[::1]:5434/app?target_session_attrs=read-write&sslmode=require",
        )
        .unwrap();
        assert_eq!(
            hosts,
            [
                "postgres://app:p%40ss@db1:5432/app?sslmode=require",
                "postgres://app:p%40ss@db2/app?sslmode=require",
                "postgres://app:p%40ss@[::1]:5434/app?sslmode=require",
            ]
        );
        assert_eq!(
            split_hosts("postgresql://db1,db2").unwrap(),
            ["postgresql://db1", "postgresql://db2"]
        );
    }

    #[test]
    fn a_target_other_than_the_primary_or_an_empty_host_is_refused() {
        let refused =
            split_hosts("postgres://db1,db2/app?target_session_attrs=standby").unwrap_err();
        assert!(
            refused.contains("`target_session_attrs=standby`"),
            "{refused}"
        );
        let refused = split_hosts("postgres://db1,,db2/app").unwrap_err();
        assert!(refused.contains("empty host"), "{refused}");
    }
}
