//! Audio for speech recognition, in process (ffmpeg-next): a media file's best audio stream
//! decoded and resampled (libswresample) to 16 kHz mono 16-bit PCM, cut into chunks that fit a
//! transcription service's upload limit, and each chunk written as a WAV file in memory.
//!
//! 16 kHz mono is what Whisper-family models take in: anything more is resampled away by the
//! server, so sending it would only spend upload bytes. Chunks are cut at the quietest 50 ms of
//! their second half, so a cut falls in a pause rather than inside a word (a word split over two
//! uploads is misheard in both).

use crate::error::StageError;
use ffmpeg_next as ff;
use std::path::Path;

/// Samples per second of the PCM this module produces.
pub const RATE: u32 = 16_000;
/// Bytes of the WAV header `wav` writes.
pub const WAV_HEADER: usize = 44;
/// The window over which loudness (RMS) is compared when choosing a cut.
pub const QUIET_WINDOW: usize = (RATE / 20) as usize;
/// Which part of a full chunk is searched for its cut: the second half, so a chunk is never
/// shorter than half the limit (each upload has a fixed cost) and the search always spans more
/// than a spoken phrase.
const SEARCH_FROM: f64 = 0.5;

fn decode_err(path: &Path, e: ff::Error) -> StageError {
    StageError::data(
        "unreadable_audio",
        format!("{}: audio: {e}", path.display()),
    )
}

/// The best audio stream of `path` as 16 kHz mono PCM; `None` when the file has no audio stream.
pub fn decode_mono_16k(path: &Path) -> Result<Option<Vec<i16>>, StageError> {
    crate::engines::ffmpeg::init();
    let mut ictx = ff::format::input(path)
        .map_err(|e| StageError::data("unreadable", format!("{}: {e}", path.display())))?;
    let Some(stream) = ictx.streams().best(ff::media::Type::Audio) else {
        return Ok(None);
    };
    let index = stream.index();
    let ctx = ff::codec::context::Context::from_parameters(stream.parameters())
        .map_err(|e| decode_err(path, e))?;
    let mut decoder = ctx.decoder().audio().map_err(|e| decode_err(path, e))?;
    let mut out = Resampled::default();
    let mut frame = ff::frame::Audio::empty();
    for (s, packet) in ictx.packets() {
        if s.index() != index {
            continue;
        }
        // A damaged packet loses its few milliseconds, not the whole transcript.
        if decoder.send_packet(&packet).is_err() {
            continue;
        }
        while decoder.receive_frame(&mut frame).is_ok() {
            out.push(&mut frame).map_err(|e| decode_err(path, e))?;
        }
    }
    let _ = decoder.send_eof();
    while decoder.receive_frame(&mut frame).is_ok() {
        out.push(&mut frame).map_err(|e| decode_err(path, e))?;
    }
    out.flush().map_err(|e| decode_err(path, e))?;
    Ok(Some(out.pcm))
}

/// What the decoder produced so far, and the resampler for the current input format (rebuilt
/// when a stream changes its format, rate or layout midway, as some broadcasts do).
#[derive(Default)]
struct Resampled {
    pcm: Vec<i16>,
    swr: Option<(
        ff::software::resampling::Context,
        (ff::format::Sample, u32, i32),
    )>,
}

fn mono_frame(samples: usize) -> ff::frame::Audio {
    let mut f = ff::frame::Audio::new(
        ff::format::Sample::I16(ff::format::sample::Type::Packed),
        samples,
        ff::ChannelLayout::MONO,
    );
    f.set_rate(RATE);
    f
}

impl Resampled {
    fn push(&mut self, frame: &mut ff::frame::Audio) -> Result<(), ff::Error> {
        if frame.samples() == 0 {
            return Ok(());
        }
        // Streams that do not name their layout (order "unspecified") get the default layout for
        // their channel count, which is what swresample needs to downmix them.
        if frame.channel_layout().is_empty() {
            frame.set_channel_layout(ff::ChannelLayout::default(frame.channels().max(1) as i32));
        }
        let key = (
            frame.format(),
            frame.rate(),
            frame.channel_layout().channels(),
        );
        if self.swr.as_ref().is_none_or(|(_, k)| *k != key) {
            self.flush()?;
            let swr = ff::software::resampling::Context::get(
                frame.format(),
                frame.channel_layout(),
                frame.rate(),
                ff::format::Sample::I16(ff::format::sample::Type::Packed),
                ff::ChannelLayout::MONO,
                RATE,
            )?;
            self.swr = Some((swr, key));
        }
        let (swr, _) = self.swr.as_mut().expect("just set");
        // Room for every input sample at the output rate, plus what the filter holds back.
        let room = frame.samples() * RATE as usize / frame.rate().max(1) as usize + 256;
        let mut out = mono_frame(room);
        swr.run(frame, &mut out)?;
        append(&mut self.pcm, &out);
        Ok(())
    }

    /// Drains what the resampler holds back (its filter delay) into `pcm`.
    fn flush(&mut self) -> Result<(), ff::Error> {
        if let Some((mut swr, _)) = self.swr.take() {
            loop {
                let mut out = mono_frame(4096);
                swr.flush(&mut out)?;
                if out.samples() == 0 {
                    break;
                }
                append(&mut self.pcm, &out);
            }
        }
        Ok(())
    }
}

fn append(pcm: &mut Vec<i16>, frame: &ff::frame::Audio) {
    let n = frame.samples();
    let bytes = &frame.data(0)[..2 * n];
    pcm.extend(
        bytes
            .chunks_exact(2)
            .map(|b| i16::from_ne_bytes([b[0], b[1]])),
    );
}

/// `samples` (16 kHz mono) as a WAV file: RIFF header, 16-bit little-endian PCM.
pub fn wav(samples: &[i16]) -> Vec<u8> {
    let data = (samples.len() * 2) as u32;
    let mut out = Vec::with_capacity(WAV_HEADER + data as usize);
    out.extend_from_slice(b"RIFF");
    out.extend_from_slice(&(36 + data).to_le_bytes());
    out.extend_from_slice(b"WAVEfmt ");
    out.extend_from_slice(&16u32.to_le_bytes()); // fmt chunk size
    out.extend_from_slice(&1u16.to_le_bytes()); // PCM
    out.extend_from_slice(&1u16.to_le_bytes()); // channels
    out.extend_from_slice(&RATE.to_le_bytes());
    out.extend_from_slice(&(RATE * 2).to_le_bytes()); // bytes per second
    out.extend_from_slice(&2u16.to_le_bytes()); // bytes per frame
    out.extend_from_slice(&16u16.to_le_bytes()); // bits per sample
    out.extend_from_slice(b"data");
    out.extend_from_slice(&data.to_le_bytes());
    for s in samples {
        out.extend_from_slice(&s.to_le_bytes());
    }
    out
}

/// Samples per chunk such that its WAV file is at most `max_bytes`.
pub fn max_chunk_samples(max_bytes: u64) -> usize {
    (max_bytes.saturating_sub(WAV_HEADER as u64) / 2) as usize
}

fn rms(w: &[i16]) -> f64 {
    if w.is_empty() {
        return 0.0;
    }
    let sum: f64 = w.iter().map(|&s| (s as f64) * (s as f64)).sum();
    (sum / w.len() as f64).sqrt()
}

/// Where to cut `pcm[from..to]`: the middle of the last run of quietest windows (RMS over
/// `QUIET_WINDOW` samples, within 25 % of the quietest plus 8 units of 32767, about −72 dBFS, so
/// the codec noise left in a lossy encoding's pauses does not break a pause into pieces).
/// The middle of the pause leaves both neighbouring words whole even if the pause is short.
pub fn quietest_point(pcm: &[i16], from: usize, to: usize) -> usize {
    let to = to.min(pcm.len());
    if to <= from + QUIET_WINDOW {
        return to;
    }
    let starts: Vec<usize> = (from..=to - QUIET_WINDOW)
        .step_by(QUIET_WINDOW / 2)
        .collect();
    let levels: Vec<f64> = starts
        .iter()
        .map(|&s| rms(&pcm[s..s + QUIET_WINDOW]))
        .collect();
    let quietest = levels.iter().copied().fold(f64::INFINITY, f64::min);
    let near = |l: f64| l <= quietest * 1.25 + 8.0;
    let last = levels.iter().rposition(|&l| near(l)).unwrap_or(0);
    let mut first = last;
    while first > 0 && near(levels[first - 1]) {
        first -= 1;
    }
    let (a, b) = (starts[first], starts[last] + QUIET_WINDOW);
    (a + b) / 2
}

/// Chunk bounds `[start, end)` in samples covering `pcm`, none longer than `max_samples`, each
/// cut (but the last end) at the quietest point of the chunk's second half.
pub fn plan_chunks(pcm: &[i16], max_samples: usize) -> Vec<(usize, usize)> {
    let max = max_samples.max(2 * QUIET_WINDOW);
    let mut out = vec![];
    let mut pos = 0;
    while pcm.len() - pos > max {
        let from = pos + (max as f64 * SEARCH_FROM) as usize;
        let cut = quietest_point(pcm, from, pos + max).clamp(pos + 1, pos + max);
        out.push((pos, cut));
        pos = cut;
    }
    if pos < pcm.len() || out.is_empty() {
        out.push((pos, pcm.len()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wav_header_is_16k_mono_16_bit_pcm() {
        let w = wav(&[0, 1, -1, i16::MAX]);
        assert_eq!(w.len(), 44 + 8);
        assert_eq!(&w[0..4], b"RIFF");
        assert_eq!(u32::from_le_bytes(w[4..8].try_into().unwrap()), 36 + 8);
        assert_eq!(&w[8..16], b"WAVEfmt ");
        assert_eq!(u32::from_le_bytes(w[16..20].try_into().unwrap()), 16);
        assert_eq!(u16::from_le_bytes(w[20..22].try_into().unwrap()), 1);
        assert_eq!(u16::from_le_bytes(w[22..24].try_into().unwrap()), 1);
        assert_eq!(u32::from_le_bytes(w[24..28].try_into().unwrap()), 16_000);
        assert_eq!(u32::from_le_bytes(w[28..32].try_into().unwrap()), 32_000);
        assert_eq!(u16::from_le_bytes(w[32..34].try_into().unwrap()), 2);
        assert_eq!(u16::from_le_bytes(w[34..36].try_into().unwrap()), 16);
        assert_eq!(&w[36..40], b"data");
        assert_eq!(u32::from_le_bytes(w[40..44].try_into().unwrap()), 8);
        assert_eq!(&w[44..], &[0, 0, 1, 0, 0xff, 0xff, 0xff, 0x7f]);
        assert_eq!(max_chunk_samples(44 + 8), 4);
    }

    /// Noise-like "speech" everywhere but in the given silent spans (in samples).
    fn signal(len: usize, silent: &[(usize, usize)]) -> Vec<i16> {
        let mut x: u32 = 12345;
        (0..len)
            .map(|i| {
                x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
                if silent.iter().any(|&(a, b)| i >= a && i < b) {
                    ((x >> 16) % 5) as i16 - 2
                } else {
                    ((x >> 16) % 16_000) as i16 - 8_000
                }
            })
            .collect()
    }

    #[test]
    fn the_cut_falls_in_the_middle_of_the_pause() {
        let pcm = signal(32_000, &[(20_000, 24_000)]);
        let cut = quietest_point(&pcm, 16_000, 32_000);
        assert!((21_500..22_500).contains(&cut), "{cut}");
        // No pause at all: the quietest window still gives a cut inside the range.
        let loud = signal(32_000, &[]);
        let c = quietest_point(&loud, 16_000, 32_000);
        assert!((16_000..=32_000).contains(&c));
    }

    #[test]
    fn chunks_cover_everything_fit_the_limit_and_cut_in_pauses() {
        // 10 s with pauses at 2.5–3.0 s, 5.5–6.2 s and 8.4–9.0 s; chunks of at most 4 s.
        let s = |secs: f64| (secs * RATE as f64) as usize;
        let pauses = [(s(2.5), s(3.0)), (s(5.5), s(6.2)), (s(8.4), s(9.0))];
        let pcm = signal(s(10.0), &pauses);
        let chunks = plan_chunks(&pcm, s(4.0));
        assert_eq!(chunks.first().unwrap().0, 0);
        assert_eq!(chunks.last().unwrap().1, pcm.len());
        for w in chunks.windows(2) {
            assert_eq!(w[0].1, w[1].0);
            let cut = w[0].1;
            assert!(
                pauses.iter().any(|&(a, b)| cut > a && cut < b),
                "cut at {cut} is not in a pause: {chunks:?}"
            );
        }
        assert!(chunks.iter().all(|(a, b)| b - a <= s(4.0)));
        assert_eq!(chunks.len(), 4, "{chunks:?}");
        // Short audio is one chunk; none is empty.
        assert_eq!(plan_chunks(&pcm[..100], s(4.0)), vec![(0, 100)]);
        assert_eq!(plan_chunks(&[], s(4.0)), vec![(0, 0)]);
    }
}
