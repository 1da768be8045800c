//! Exact-time frame grabbing: seek to the keyframe before a target, decode forward to the first
//! frame at or after it, convert only the frames that are handed out.

use super::{Opened, ff_err, open};
use crate::error::StageError;
use ff::Rescale;
use ffmpeg_next as ff;
use image::RgbImage;
use std::path::Path;

/// One decoded frame, converted to RGB and rotated for display.
pub struct Grab {
    pub target_secs: f64,
    pub timestamp_secs: f64,
    pub image: RgbImage,
}

struct Decoded {
    pts: i64,
    image: RgbImage,
}

struct Grabber<'a> {
    o: &'a mut Opened,
    decoder: ff::decoder::Video,
    scaler: Option<(ff::software::scaling::Context, ff::format::Pixel, u32, u32)>,
    max_side: Option<u32>,
    eof: bool,
    read_errors: u32,
    path: &'a Path,
    /// Frames decoded (converted or not), to show that sampling does not decode everything.
    decoded: u64,
    /// Packets presented before this time are not wanted: non-reference ones are not decoded.
    skip_before: Option<i64>,
    skipping: bool,
    /// Latest presentation time among the stream's packets read so far.
    last_packet_pts: Option<i64>,
    /// Two-tap bilinear (like OpenCV's INTER_LINEAR) instead of an area-aware filter when
    /// shrinking: the cut detector must see text strokes, not their blur.
    point_like: bool,
}

impl<'a> Grabber<'a> {
    fn new(
        o: &'a mut Opened,
        decoder: ff::decoder::Video,
        max_side: Option<u32>,
        path: &'a Path,
    ) -> Self {
        Grabber {
            o,
            decoder,
            scaler: None,
            max_side,
            eof: false,
            read_errors: 0,
            path,
            decoded: 0,
            skip_before: None,
            skipping: false,
            last_packet_pts: None,
            point_like: false,
        }
    }

    fn convert_rgb(&mut self, frame: &ff::frame::Video) -> Result<RgbImage, StageError> {
        let _step = crate::profile::span("rgb");
        let (w, h, fmt) = (frame.width(), frame.height(), frame.format());
        let (ow, oh) = match self.max_side {
            Some(m) if w.max(h) > m => {
                let s = m as f64 / w.max(h) as f64;
                (
                    ((w as f64 * s).round() as u32).max(2) & !1,
                    ((h as f64 * s).round() as u32).max(2) & !1,
                )
            }
            _ => (w, h),
        };
        let rebuild =
            !matches!(&self.scaler, Some((_, f, sw, sh)) if *f == fmt && *sw == w && *sh == h);
        if rebuild {
            let ctx = ff::software::scaling::Context::get(
                fmt,
                w,
                h,
                ff::format::Pixel::RGB24,
                ow,
                oh,
                if self.point_like {
                    ff::software::scaling::Flags::POINT
                } else {
                    ff::software::scaling::Flags::BILINEAR
                },
            )
            .map_err(|e| ff_err("pixel_conversion", self.path, e))?;
            self.scaler = Some((ctx, fmt, w, h));
        }
        let (ctx, ..) = self.scaler.as_mut().expect("scaler set above");
        let mut rgb = ff::frame::Video::empty();
        ctx.run(frame, &mut rgb)
            .map_err(|e| ff_err("pixel_conversion", self.path, e))?;
        let (rw, rh) = (rgb.width(), rgb.height());
        let stride = rgb.stride(0);
        let data = rgb.data(0);
        let mut buf = Vec::with_capacity((rw * rh * 3) as usize);
        for y in 0..rh as usize {
            buf.extend_from_slice(&data[y * stride..y * stride + rw as usize * 3]);
        }
        let img = RgbImage::from_raw(rw, rh, buf)
            .ok_or_else(|| StageError::internal("rgb_buffer", "bad RGB buffer size"))?;
        Ok(match self.o.rotation_deg {
            90 => image::imageops::rotate90(&img),
            180 => image::imageops::rotate180(&img),
            270 => image::imageops::rotate270(&img),
            _ => img,
        })
    }

    /// Decodes the next frame in presentation order, or None at the end of the stream.
    fn next_frame(
        &mut self,
        want_image: impl Fn(i64) -> bool,
    ) -> Result<Option<Decoded>, StageError> {
        let _step = crate::profile::span("decode");
        let mut frame = ff::frame::Video::empty();
        loop {
            if self.decoder.receive_frame(&mut frame).is_ok() {
                self.decoded += 1;
                let pts = frame.timestamp().or(frame.pts()).unwrap_or(0);
                let image = if want_image(pts) {
                    self.convert_rgb(&frame)?
                } else {
                    RgbImage::new(0, 0)
                };
                return Ok(Some(Decoded { pts, image }));
            }
            if self.eof {
                return Ok(None);
            }
            let mut packet = ff::Packet::empty();
            match packet.read(&mut self.o.ictx) {
                Ok(()) => {
                    if packet.stream() == self.o.stream_index {
                        // A frame nobody references and nobody asked for need not be decoded:
                        // exact (references are intact) and, with B-frames, most of the work.
                        if let Some(p) = packet.pts() {
                            self.last_packet_pts =
                                Some(self.last_packet_pts.map_or(p, |l| l.max(p)));
                        }
                        let skip =
                            matches!((self.skip_before, packet.pts()), (Some(t), Some(p)) if p < t);
                        self.set_skipping(skip);
                        // A corrupt packet is skipped; the frames around it still decode.
                        let _ = self.decoder.send_packet(&packet);
                    }
                }
                Err(ff::Error::Eof) => {
                    let _ = self.decoder.send_eof();
                    self.eof = true;
                }
                Err(e) => {
                    self.read_errors += 1;
                    if self.read_errors > 50 {
                        return Err(ff_err("read_error", self.path, e));
                    }
                }
            }
        }
    }

    fn set_skipping(&mut self, skip: bool) {
        if skip != self.skipping {
            // SAFETY: plain field write on the decoder's own context, between two decode calls
            // on this thread (decoding is single-threaded, so it takes effect for the next packet).
            unsafe {
                (*self.decoder.as_mut_ptr()).skip_frame = if skip {
                    ff::ffi::AVDiscard::AVDISCARD_NONREF
                } else {
                    ff::ffi::AVDiscard::AVDISCARD_DEFAULT
                };
            }
            self.skipping = skip;
        }
    }

    fn seek(&mut self, target_pts: i64) -> Result<(), StageError> {
        let us = target_pts.rescale(self.o.time_base, ff::rescale::TIME_BASE);
        self.o
            .ictx
            .seek(us, ..us)
            .map_err(|e| ff_err("seek_failed", self.path, e))?;
        self.decoder.flush();
        self.eof = false;
        Ok(())
    }

    /// Decodes forward to the first frame presented at or after `pts`, converting only that
    /// one; None when the stream ends first.
    fn first_from(&mut self, pts: i64) -> Result<Option<Decoded>, StageError> {
        self.skip_before = Some(pts);
        while let Some(d) = self.next_frame(|p| p >= pts)? {
            if d.pts >= pts {
                return Ok(Some(d));
            }
        }
        Ok(None)
    }

    /// The frame for a target `t` the stream ended before (`last_pts`: the latest frame
    /// grabbed): the last frame when `t` lies within one frame of the end, else the file is
    /// shorter than its header says.
    fn last_frame_instead(
        &mut self,
        t: f64,
        last_pts: Option<i64>,
        frame_secs: f64,
        to_secs: impl Fn(i64) -> f64,
    ) -> Result<Decoded, StageError> {
        let path = self.path;
        let end = self.last_packet_pts.or(last_pts);
        match end {
            Some(e) if t - to_secs(e) <= 1.5 * frame_secs => {
                let pts = e;
                self.seek(pts)?;
                self.first_from(pts)?.ok_or_else(|| {
                    StageError::data(
                        "truncated",
                        format!("{}: cannot decode the last frame", path.display()),
                    )
                })
            }
            _ => Err(StageError::data(
                "truncated",
                format!(
                    "{}: no frame at or after {t:.3} s; decodable video ends at {} (truncated or corrupt file)",
                    path.display(),
                    end.map(|e| format!("{:.3} s", to_secs(e)))
                        .unwrap_or_else(|| "the start".into())
                ),
            )),
        }
    }

    /// Timestamp of the keyframe a seek to `pts` would land on, when the demuxer has an index.
    fn keyframe_before(&self, pts: i64) -> Option<i64> {
        let stream = self.o.ictx.stream(self.o.stream_index)?;
        // SAFETY: the stream pointer lives as long as `ictx`; the entry is read immediately.
        unsafe {
            let e = ff::ffi::avformat_index_get_entry_from_timestamp(
                stream.as_ptr() as *mut _,
                pts,
                ff::ffi::AVSEEK_FLAG_BACKWARD,
            );
            if e.is_null() {
                None
            } else {
                Some((*e).timestamp)
            }
        }
    }
}

/// A single-threaded decoder for the opened video stream. One thread per decoder measured
/// fastest for seek-and-decode; the parallelism is across videos.
fn video_decoder(o: &Opened, path: &Path) -> Result<ff::decoder::Video, StageError> {
    let stream = o
        .ictx
        .stream(o.stream_index)
        .ok_or_else(|| StageError::internal("stream_vanished", ""))?;
    let mut ctx = ff::codec::context::Context::from_parameters(stream.parameters())
        .map_err(|e| ff_err("unsupported_codec", path, e))?;
    ctx.set_threading(ff::codec::threading::Config {
        kind: ff::codec::threading::Type::None,
        count: 1,
        ..Default::default()
    });
    ctx.decoder()
        .video()
        .map_err(|e| ff_err("unsupported_codec", path, e))
}

/// Grabs the frames at `targets_secs` (seconds from the stream's start).
pub fn grab_at(
    path: &Path,
    targets_secs: &[f64],
    max_side: Option<u32>,
) -> Result<Vec<Grab>, StageError> {
    grab_at_counted(path, targets_secs, max_side).map(|(g, _)| g)
}

/// `grab_at`, also returning how many frames were decoded.
pub fn grab_at_counted(
    path: &Path,
    targets_secs: &[f64],
    max_side: Option<u32>,
) -> Result<(Vec<Grab>, u64), StageError> {
    let mut o = open(path)?;
    let mut targets: Vec<(usize, f64)> = targets_secs.iter().copied().enumerate().collect();
    targets.sort_by(|a, b| a.1.total_cmp(&b.1));
    let decoder = video_decoder(&o, path)?;
    let tb = f64::from(o.time_base);
    let start = o.start_pts;
    let frame_secs = if o.fps > 0.0 { 1.0 / o.fps } else { 0.05 };
    let mut g = Grabber::new(&mut o, decoder, max_side, path);
    let mut out: Vec<Option<Grab>> = (0..targets.len()).map(|_| None).collect();
    let mut last: Option<Decoded> = None;
    let to_secs = |pts: i64| (pts - start) as f64 * tb;
    for (slot, t) in targets {
        // Small epsilon so a target that equals a frame time is not pushed to the next frame by rounding.
        let target_pts = start + ((t / tb) - 1e-6).ceil() as i64;
        if let Some(l) = &last
            && l.pts >= target_pts
        {
            out[slot] = Some(Grab {
                target_secs: t,
                timestamp_secs: to_secs(l.pts),
                image: l.image.clone(),
            });
            continue;
        }
        let need_seek = match (&last, g.keyframe_before(target_pts)) {
            (None, _) => true,
            (Some(l), Some(k)) => k > l.pts,
            (Some(_), None) => true,
        };
        if need_seek {
            g.seek(target_pts)?;
        }
        let d = match g.first_from(target_pts)? {
            Some(d) => d,
            None => g.last_frame_instead(t, last.as_ref().map(|l| l.pts), frame_secs, to_secs)?,
        };
        out[slot] = Some(Grab {
            target_secs: t,
            timestamp_secs: to_secs(d.pts),
            image: d.image.clone(),
        });
        last = Some(d);
    }
    let decoded = g.decoded;
    Ok((out.into_iter().flatten().collect(), decoded))
}

/// Decodes the whole video once and hands `each` one small frame (longer side `side` px) every
/// 1/`fps` seconds: the first frame at or after each tick. Frames between ticks that nothing
/// references are not decoded. Returns the number of frames handed over.
pub fn sample_small(
    path: &Path,
    fps: f64,
    side: u32,
    mut each: impl FnMut(f64, &RgbImage),
) -> Result<u64, StageError> {
    let mut o = open(path)?;
    let decoder = video_decoder(&o, path)?;
    let tb = f64::from(o.time_base);
    let start = o.start_pts;
    let step = ((1.0 / fps) / tb).max(1.0);
    let mut g = Grabber::new(&mut o, decoder, Some(side), path);
    g.point_like = true;
    let mut tick = 0u64;
    let next_pts = |tick: u64| start + ((tick as f64 * step) - 1e-6).ceil() as i64;
    let mut handed = 0u64;
    g.skip_before = Some(next_pts(0));
    let mut want = next_pts(0);
    while let Some(d) = g.next_frame(|pts| pts >= want)? {
        if d.pts < want {
            continue;
        }
        each((d.pts - start) as f64 * tb, &d.image);
        handed += 1;
        // The next tick after this frame (a long frame may cover several ticks).
        while next_pts(tick) <= d.pts {
            tick += 1;
        }
        want = next_pts(tick);
        g.skip_before = Some(want);
    }
    Ok(handed)
}

/// Every frame whose presentation time lies in [start, end), at most `limit` frames.
pub fn grab_range(
    path: &Path,
    start_secs: f64,
    end_secs: f64,
    limit: usize,
    max_side: Option<u32>,
) -> Result<Vec<Grab>, StageError> {
    let mut o = open(path)?;
    let decoder = video_decoder(&o, path)?;
    let tb = f64::from(o.time_base);
    let start = o.start_pts;
    let lo = start + ((start_secs / tb) - 1e-6).ceil() as i64;
    let hi = start + ((end_secs / tb) - 1e-6).ceil() as i64;
    let mut g = Grabber::new(&mut o, decoder, max_side, path);
    g.seek(lo)?;
    g.skip_before = Some(lo);
    let mut out = Vec::new();
    while let Some(d) = g.next_frame(|pts| pts >= lo && pts < hi)? {
        if d.pts >= hi || out.len() >= limit {
            break;
        }
        if d.pts >= lo {
            let ts = (d.pts - start) as f64 * tb;
            out.push(Grab {
                target_secs: ts,
                timestamp_secs: ts,
                image: d.image,
            });
        }
    }
    Ok(out)
}
