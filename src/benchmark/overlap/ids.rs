//! YouTube ids out of what lists name a video: a bare 11-character id, or any of the URL forms
//! YouTube links use (watch?v=, youtu.be/, shorts/, embed/, live/, v/; www., m., music. and the
//! no-cookie host; with or without a scheme, with other query parameters or a #t= anchor).

/// An id as YouTube writes them: 11 characters of A–Z, a–z, 0–9, `-` and `_`.
pub fn is_youtube_id(s: &str) -> bool {
    s.len() == 11
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// The YouTube id a text names, if it names one.
pub fn youtube_id(text: &str) -> Option<String> {
    let s = text.trim();
    if is_youtube_id(s) {
        return Some(s.to_string());
    }
    let rest = s
        .strip_prefix("https://")
        .or_else(|| s.strip_prefix("http://"))
        .unwrap_or(s);
    let (host, path) = rest.split_once('/')?;
    let host = host.to_ascii_lowercase();
    let host = host.strip_prefix("www.").unwrap_or(&host);
    let host = host
        .strip_prefix("m.")
        .or_else(|| host.strip_prefix("music."))
        .unwrap_or(host);
    let path = path.split('#').next().unwrap_or("");
    let (path, query) = path.split_once('?').unwrap_or((path, ""));
    let candidate = match host {
        "youtu.be" => path.split('/').next().map(str::to_string),
        "youtube.com" | "youtube-nocookie.com" => {
            let mut parts = path.split('/');
            match parts.next() {
                Some("watch") => query
                    .split('&')
                    .find_map(|kv| kv.strip_prefix("v="))
                    .map(str::to_string),
                Some("shorts" | "embed" | "live" | "v") => parts.next().map(str::to_string),
                _ => None,
            }
        }
        _ => None,
    }?;
    is_youtube_id(&candidate).then_some(candidate)
}

/// How a video is compared by id: its YouTube id when it names one, else the id as written.
pub fn video_key(video_id: &str, url: Option<&str>) -> String {
    url.and_then(youtube_id)
        .or_else(|| youtube_id(video_id))
        .unwrap_or_else(|| video_id.trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_link_form_names_the_same_id() {
        let id = "dQw4w9WgXcQ";
        for s in [
            "dQw4w9WgXcQ",
            " dQw4w9WgXcQ ",
            "https://www.youtube.com/watch?v=dQw4w9WgXcQ",
            "http://youtube.com/watch?feature=share&v=dQw4w9WgXcQ&t=10s",
            "youtube.com/watch?v=dQw4w9WgXcQ#t=3",
            "https://m.youtube.com/watch?v=dQw4w9WgXcQ",
            "https://music.youtube.com/watch?v=dQw4w9WgXcQ&list=x",
            "https://youtu.be/dQw4w9WgXcQ?si=abc",
            "https://www.youtube.com/shorts/dQw4w9WgXcQ",
            "https://www.youtube-nocookie.com/embed/dQw4w9WgXcQ",
            "https://www.youtube.com/live/dQw4w9WgXcQ?feature=share",
            "https://www.YouTube.com/v/dQw4w9WgXcQ",
        ] {
            assert_eq!(youtube_id(s).as_deref(), Some(id), "{s}");
        }
        for s in [
            "dQw4w9WgXc",
            "dQw4w9WgXcQQ",
            "https://vimeo.com/dQw4w9WgXcQ",
            "https://www.youtube.com/channel/UCabcdefghi",
            "https://www.youtube.com/watch?list=dQw4w9WgXcQ",
            "not an id!!",
        ] {
            assert_eq!(youtube_id(s), None, "{s}");
        }
        assert_eq!(
            video_key("demo_03", Some("https://youtu.be/dQw4w9WgXcQ")),
            id
        );
        assert_eq!(video_key("demo_03", None), "demo_03");
    }
}
