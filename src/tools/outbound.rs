//! Where tools may send requests: the defence against server-side request forgery.
//!
//! Tenants register the URLs their tools call, so a tenant could point a tool at the
//! service's own network: loopback, the cloud metadata address, private ranges. Tool traffic
//! therefore goes only over `http`/`https` to public addresses, checked after DNS resolution
//! (a public name that resolves to `127.0.0.1` is refused) and on every redirect. Operators
//! who do want internal APIs allow networks or host names explicitly. LLM provider URLs
//! are operator configuration and do not pass through here.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use ipnet::IpNet;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};

/// Redirects followed at most.
const MAX_REDIRECTS: usize = 10;

/// A URL or address the policy refuses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OutboundError {
    /// Not `http` or `https`.
    #[error("only http and https URLs are allowed, not {0:?}")]
    Scheme(String),
    /// Not a URL.
    #[error("is not a valid URL")]
    NotUrl,
    /// A literal address that is not public and not allowed.
    #[error("points to {0}, a loopback, private, link-local or otherwise internal address; an operator can allow it with [outbound] allow")]
    Internal(IpAddr),
}

/// Networks and host names tools may reach besides public addresses.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OutboundPolicy {
    networks: Vec<IpNet>,
    hosts: Vec<String>,
}

impl OutboundPolicy {
    /// A policy allowing `entries` besides public addresses: CIDRs (`10.0.0.0/8`), single
    /// addresses, or host names (`kb.internal`).
    pub fn allowing(entries: &[String]) -> Result<Self, String> {
        let mut policy = Self::default();
        for entry in entries.iter().map(|e| e.trim()).filter(|e| !e.is_empty()) {
            if let Ok(net) = entry.parse::<IpNet>() {
                policy.networks.push(net);
            } else if let Ok(ip) = entry.parse::<IpAddr>() {
                policy.networks.push(IpNet::from(ip));
            } else if entry.contains('/') || entry.contains(' ') {
                return Err(format!("{entry:?} is neither a network nor a host name"));
            } else {
                policy.hosts.push(entry.to_ascii_lowercase());
            }
        }
        Ok(policy)
    }

    /// Whether requests may go to `ip`.
    pub fn permits(&self, ip: IpAddr) -> bool {
        is_public(ip) || self.networks.iter().any(|net| net.contains(&ip))
    }

    fn allows_host(&self, host: &str) -> bool {
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        self.hosts.contains(&host)
    }

    /// Checks what can be checked without DNS: the scheme, and a literal address.
    pub fn check_url(&self, url: &str) -> Result<(), OutboundError> {
        let url = reqwest::Url::parse(url).map_err(|_| OutboundError::NotUrl)?;
        self.check_parsed(&url)
    }

    fn check_parsed(&self, url: &reqwest::Url) -> Result<(), OutboundError> {
        if !matches!(url.scheme(), "http" | "https") {
            return Err(OutboundError::Scheme(url.scheme().to_owned()));
        }
        let literal = match url.host() {
            Some(url::Host::Ipv4(ip)) => Some(IpAddr::V4(ip)),
            Some(url::Host::Ipv6(ip)) => Some(IpAddr::V6(ip)),
            Some(url::Host::Domain(_)) | None => None,
        };
        match literal {
            Some(ip) if !self.permits(ip) => Err(OutboundError::Internal(ip)),
            Some(_) | None => Ok(()),
        }
    }

    /// An HTTP client that keeps to this policy: names resolve only to permitted addresses
    /// (unless the name itself is allowed), and every redirect is checked.
    pub fn client(self: &Arc<Self>) -> reqwest::Client {
        let redirects = Arc::clone(self);
        reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .dns_resolver(Arc::new(PolicyResolver(Arc::clone(self))))
            .redirect(reqwest::redirect::Policy::custom(move |attempt| {
                if attempt.previous().len() >= MAX_REDIRECTS {
                    return attempt.error("too many redirects");
                }
                match redirects.check_parsed(attempt.url()) {
                    Ok(()) => attempt.follow(),
                    Err(err) => attempt.error(err),
                }
            }))
            .build()
            .unwrap_or_default()
    }
}

/// Resolves names and keeps only the addresses the policy permits.
struct PolicyResolver(Arc<OutboundPolicy>);

impl Resolve for PolicyResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let policy = Arc::clone(&self.0);
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let resolved: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let allowed_by_name = policy.allows_host(&host);
            let kept: Vec<SocketAddr> = resolved
                .into_iter()
                .filter(|addr| allowed_by_name || policy.permits(addr.ip()))
                .collect();
            if kept.is_empty() {
                // The resolved address is not named: it may itself be worth hiding.
                return Err(format!(
                    "{host} resolves only to addresses the outbound policy refuses"
                )
                .into());
            }
            Ok(Box::new(kept.into_iter()) as Addrs)
        })
    }
}

/// Whether `ip` is on the public internet: not loopback, private, link-local, unique-local,
/// unspecified, shared (CGNAT), multicast, broadcast, documentation or reserved.
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(ip) => is_public_v4(ip),
        IpAddr::V6(ip) => match ip.to_ipv4_mapped() {
            Some(v4) => is_public_v4(v4),
            None => is_public_v6(ip),
        },
    }
}

fn is_public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, ..] = ip.octets();
    !(ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_unspecified()
        || ip.is_broadcast()
        || ip.is_multicast()
        || ip.is_documentation()
        || a == 0
        || a >= 240
        || (a == 100 && (64..128).contains(&b))
        || (a == 192 && b == 0 && ip.octets()[2] == 0)
        || (a == 198 && (18..20).contains(&b)))
}

fn is_public_v6(ip: Ipv6Addr) -> bool {
    let first = ip.segments()[0];
    let nat64 = ip.segments()[..6] == [0x64, 0xff9b, 0, 0, 0, 0];
    if nat64 {
        let [.., c, d] = ip.segments();
        let embedded = Ipv4Addr::from((u32::from(c) << 16) | u32::from(d));
        return is_public_v4(embedded);
    }
    !(ip.is_loopback()
        || ip.is_unspecified()
        || ip.is_multicast()
        || (first & 0xfe00) == 0xfc00
        || (first & 0xffc0) == 0xfe80
        || (first & 0xffc0) == 0xfec0
        || first == 0x2001 && ip.segments()[1] == 0x0db8)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn internal_addresses_are_not_public() {
        for internal in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "0.0.0.0",
            "100.64.0.1",
            "::1",
            "::",
            "fd00::1",
            "fe80::1",
            "::ffff:127.0.0.1",
            "64:ff9b::a9fe:a9fe",
        ] {
            assert!(!is_public(ip(internal)), "{internal}");
        }
        for public in [
            "8.8.8.8",
            "1.1.1.1",
            "2606:4700:4700::1111",
            "64:ff9b::808:808",
        ] {
            assert!(is_public(ip(public)), "{public}");
        }
    }

    #[test]
    fn urls_are_checked_for_scheme_and_literal_addresses() {
        let strict = OutboundPolicy::default();
        assert_eq!(
            strict.check_url("file:///etc/passwd"),
            Err(OutboundError::Scheme("file".into()))
        );
        assert_eq!(
            strict.check_url("gopher://example.com"),
            Err(OutboundError::Scheme("gopher".into()))
        );
        assert_eq!(
            strict.check_url("http://169.254.169.254/latest/meta-data"),
            Err(OutboundError::Internal(ip("169.254.169.254")))
        );
        assert!(strict.check_url("http://[::1]:8080/").is_err());
        assert!(strict.check_url("https://api.example.com/v1").is_ok());
        let allowing =
            OutboundPolicy::allowing(&["10.0.0.0/8".into(), "127.0.0.1".into()]).unwrap();
        assert!(allowing.check_url("http://10.2.3.4/").is_ok());
        assert!(allowing.check_url("http://127.0.0.1:9000/").is_ok());
        assert!(allowing.check_url("http://192.168.0.1/").is_err());
        assert!(OutboundPolicy::allowing(&["not a net/x".into()]).is_err());
    }

    #[tokio::test]
    async fn a_name_resolving_to_loopback_is_refused_unless_allowed() {
        let refusing = PolicyResolver(Arc::new(OutboundPolicy::default()));
        let name: Name = "localhost".parse().unwrap();
        let err = refusing.resolve(name).await.err().unwrap().to_string();
        assert!(err.contains("refuses"), "{err}");
        assert!(
            !err.contains("127.0.0.1"),
            "the resolved address is not shown: {err}"
        );
        let allowing = PolicyResolver(Arc::new(
            OutboundPolicy::allowing(&["localhost".into()]).unwrap(),
        ));
        let name: Name = "localhost".parse().unwrap();
        assert!(allowing.resolve(name).await.is_ok());
    }
}
