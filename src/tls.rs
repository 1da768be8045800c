//! One TLS crypto provider for the process. Two of our HTTP stacks enable different rustls
//! back ends (ring for reqwest 0.12 and the YouTube client, aws-lc-rs for the object-store
//! client), and rustls then refuses to pick one by itself: every client would fail to build.
//! Every entry point that makes an HTTP client calls `ensure_provider` first.

/// Installs ring as the process default, once; a no-op if a provider is already installed.
pub fn ensure_provider() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}
