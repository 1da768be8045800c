#!/usr/bin/env python3
"""Makes the non-frame image set of the OCR benchmark: the kinds of files a user hands to
`vidcurate ocr` that are not video frames, each drawn with Pillow so the set is reproducible.

Kinds (a few of each): photos with text (RGB JPEG over a noisy gradient), scans (greyscale PNG
of paragraphs), word crops (small RGB images of one word), RGBA text on a transparent background
(white and black), RGBA opaque images, grey + alpha, palette PNG and GIF, 1-bit PNG, CMYK JPEG,
and JPEGs with an EXIF orientation tag. 16-bit greyscale files are made too (`i16_*`), but the
benchmark reports them apart: RapidOCR 1.4.4 hands their raw 16-bit values to the models.

Usage: make_images.py OUT_DIR [--seed K]
"""
import argparse
import os
import random

from PIL import Image, ImageDraw, ImageFilter, ImageFont

FONT = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"
BOLD = "/usr/share/fonts/truetype/dejavu/DejaVuSans-Bold.ttf"
WORDS = ["Harbour", "Station", "Market", "Library", "Exit 12", "Open daily", "Platform 3",
         "Tickets", "Museum", "Bakery", "Pharmacy", "Hotel Central", "Parking", "Bus stop 42"]
LINES = ["The council met on Tuesday to discuss", "the new budget for public transport and",
         "agreed to extend the night service until", "two in the morning from next spring.",
         "Residents can send comments by email", "before the end of the month."]


def font(size, bold=False):
    return ImageFont.truetype(BOLD if bold else FONT, size)


def noisy_background(rng, w, h):
    img = Image.new("RGB", (w, h))
    px = img.load()
    a, b = [rng.randint(40, 200) for _ in range(3)], [rng.randint(40, 200) for _ in range(3)]
    for y in range(h):
        t = y / h
        for x in range(w):
            n = rng.randint(-12, 12)
            px[x, y] = tuple(max(0, min(255, int(a[c] * (1 - t) + b[c] * t) + n)) for c in range(3))
    return img.filter(ImageFilter.GaussianBlur(1))


def photo(rng, i):
    img = noisy_background(rng, 640, 420)
    d = ImageDraw.Draw(img)
    for k in range(2):
        text = rng.choice(WORDS)
        d.rectangle([30, 60 + 160 * k, 30 + 26 * len(text), 130 + 160 * k], fill=(250, 250, 245))
        d.text((40, 70 + 160 * k), text, font=font(44, True), fill=(20, 20, 30))
    return img


def scan(rng, i):
    img = Image.new("L", (900, 420), 245)
    d = ImageDraw.Draw(img)
    for k, line in enumerate(LINES):
        d.text((40, 30 + 60 * k), line, font=font(30), fill=rng.randint(10, 50))
    return img.rotate(rng.uniform(-1.0, 1.0), fillcolor=245, resample=Image.BICUBIC)


def crop(rng, i):
    text = WORDS[i % len(WORDS)]
    size = rng.choice([20, 24, 28])
    w = int(size * 0.62 * len(text)) + 16
    img = Image.new("RGB", (w, size + 14), tuple(rng.randint(200, 255) for _ in range(3)))
    ImageDraw.Draw(img).text((8, 5), text, font=font(size), fill=(10, 10, 10))
    return img


def on_transparent(rng, i, colour):
    img = Image.new("RGBA", (700, 200), (0, 0, 0, 0))
    d = ImageDraw.Draw(img)
    d.text((30, 30), WORDS[i % len(WORDS)], font=font(56, True), fill=colour + (255,))
    d.text((30, 110), WORDS[(i + 5) % len(WORDS)], font=font(44), fill=colour + (255,))
    return img


def grey_alpha(rng, i):
    return on_transparent(rng, i, (0, 0, 0)).convert("LA")


def text_card(rng, i, size=(700, 220)):
    img = Image.new("RGB", size, (235, 240, 250))
    d = ImageDraw.Draw(img)
    d.text((30, 30), WORDS[i % len(WORDS)], font=font(60, True), fill=(200, 30, 30))
    d.text((30, 120), WORDS[(i + 3) % len(WORDS)], font=font(48), fill=(20, 40, 120))
    return img


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=11)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    os.makedirs(a.out, exist_ok=True)
    n = 0
    for i in range(4):
        photo(rng, i).save(os.path.join(a.out, f"photo_{i}.jpg"), quality=88)
        scan(rng, i).save(os.path.join(a.out, f"scan_{i}.png"))
        crop(rng, i).save(os.path.join(a.out, f"crop_{i}.png"))
        on_transparent(rng, i, (255, 255, 255)).save(os.path.join(a.out, f"rgba_white_{i}.png"))
        on_transparent(rng, i, (0, 0, 0)).save(os.path.join(a.out, f"rgba_black_{i}.png"))
        text_card(rng, i).convert("RGBA").save(os.path.join(a.out, f"rgba_opaque_{i}.png"))
        grey_alpha(rng, i).save(os.path.join(a.out, f"la_{i}.png"))
        text_card(rng, i).quantize(16).save(os.path.join(a.out, f"palette_{i}.png"))
        text_card(rng, i).convert("P", palette=Image.ADAPTIVE, colors=32).save(os.path.join(a.out, f"gif_{i}.gif"))
        text_card(rng, i).convert("L").point(lambda v: 255 if v > 140 else 0).convert("1").save(
            os.path.join(a.out, f"bilevel_{i}.png"))
        text_card(rng, i).convert("CMYK").save(os.path.join(a.out, f"cmyk_{i}.jpg"), quality=90)
        # EXIF orientation 6 (rotate 90 clockwise to display) on an upright picture.
        exif = Image.Exif()
        exif[0x0112] = [3, 6, 8, 1][i]
        text_card(rng, i).save(os.path.join(a.out, f"exif_{i}.jpg"), quality=90, exif=exif.tobytes())
        grey16 = text_card(rng, i).convert("L").point(lambda v: v * 257, "I").convert("I;16")
        grey16.save(os.path.join(a.out, f"i16_{i}.png"))
        n += 13
    print(f"images: {n} in {a.out}")


if __name__ == "__main__":
    main()
