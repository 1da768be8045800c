#!/usr/bin/env python3
"""Makes the non-frame image set of the OCR benchmark: the kinds of files a user hands to
`vidcurate ocr` that are not video frames, each drawn with Pillow so the set is reproducible.

Kinds (a few of each): photos with text (RGB JPEG over a noisy gradient), scans (greyscale PNG
of paragraphs), word crops (small RGB images of one word), RGBA text on a transparent background
(white and black), RGBA opaque images, grey + alpha, palette PNG and GIF, 1-bit PNG, CMYK JPEG,
and JPEGs with an EXIF orientation tag. 16-bit greyscale files are made too (`i16_*`), but the
benchmark reports them apart: RapidOCR 1.4.4 hands their raw 16-bit values to the models.

`--real` makes the real-image set instead, the three kinds on which RapidOCR and vidcurate
were seen to disagree on public images (issue 27):
- `street_*.jpg`: 1280x720 views of photos with small, low-contrast signs, saved as a camera does
  (JPEG quality 75-85, 4:2:0 chroma). The photos are scikit-image 0.26.0's data files, taken from its PyPI
  wheel (`pip download`, kept in data/bench/skimage/): astronaut, rocket and hubble_deep_field
  (public domain: NASA, SpaceX), chelsea, coffee, brick and gravel (CC0), as its
  `skimage/data/_fetchers.py` documents them.
  Their signs are written to OUT_DIR.truth.json (file name -> the texts drawn), the word-level
  ground truth of a scene-text set (ICDAR 2015 style: 1280x720 photos with small words).
- `page_*.jpg`: an English book page (DejaVu Serif, punctuation followed directly by words, as
  in "book;their") stored as an 8-bit palette PNG under a `.jpg` name, with a grey palette,
  half of them with a transparent palette entry (tRNS), as page scanners and optimisers write.
- `strip_*.{jpg,png}`: 1167x54 strips of mixed Chinese/English text (WenQuanYi Micro Hei, from
  Debian's fonts-wqy-microhei, installed by scripts/setup.sh).

Usage: make_images.py OUT_DIR [--seed K] [--real]
"""
import argparse
import glob
import json
import os
import random
import subprocess
import sys
import zipfile

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


ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SKIMAGE = "scikit-image==0.26.0"
PHOTOS = ["astronaut.png", "chelsea.png", "coffee.png", "rocket.jpg", "brick.png", "gravel.png",
          "hubble_deep_field.jpg"]
SERIF = "/usr/share/fonts/truetype/dejavu/DejaVuSerif.ttf"
CJK = "/usr/share/fonts/truetype/wqy/wqy-microhei.ttc"
SIGNS = ["No Parking", "Main St", "Pharmacy", "Exit 3", "Open 9-18", "Cafe Lumen", "Bus 42", "One Way",
         "Hotel Ria", "Taxi", "Gate B", "Sale 30%", "Rue Verte", "Bakery", "Wi-Fi free", "Platform 7",
         "Keep Left", "Books & Maps", "Ticket Office", "Dental Clinic"]
PAGE = ("It was the best book;their friends said so,and the reader,who had come far,sat down:the page "
        "was dry;the ink,old and brown,ran into words like (this) and 'that'.He wrote:\"never again\";she "
        "laughed.Chapter 3.The end;or so they thought,until the letter came:it said,in short,that the "
        "house was sold;their garden,the trees,the old well,all of it.Nobody knew why;nobody asked.The "
        "next morning,at six,they left;the road was long,the rain was cold,and the book stayed behind.")
STRIPS = ["2024年第3季度 Revenue 增长12.5%", "北京 Beijing 上海 Shanghai 广州 Guangzhou",
          "订单号 Order No. A39217 已发货 Shipped", "温度 Temperature 23°C 湿度 Humidity 45%",
          "欢迎光临 Welcome to Café 小熊 Little Bear", "第一章 Chapter One 开始 The Start",
          "《哈利波特》Harry Potter 第7部 Part 7", "会议室 Room 301 下午3点 3 PM 开会",
          "深圳 Shenzhen 地铁1号线 Metro Line 1", "价格 Price ¥199 包邮 Free shipping"]


def skimage_photos():
    """The photos of scikit-image's wheel, downloaded once into data/bench/skimage/ (pip's cache and
    the registry are the only sources; nothing is committed)."""
    d = os.path.join(ROOT, "data", "bench", "skimage")
    out = os.path.join(d, "photos")
    if not all(os.path.exists(os.path.join(out, p)) for p in PHOTOS):
        os.makedirs(d, exist_ok=True)
        if not glob.glob(os.path.join(d, "scikit_image-*.whl")):
            subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                            SKIMAGE, "-d", d], check=True)
        wheel = sorted(glob.glob(os.path.join(d, "scikit_image-*.whl")))[0]
        os.makedirs(out, exist_ok=True)
        with zipfile.ZipFile(wheel) as z:
            for p in PHOTOS:
                with open(os.path.join(out, p), "wb") as f:
                    f.write(z.read(f"skimage/data/{p}"))
    return [os.path.join(out, p) for p in PHOTOS]


def cover(img, w, h, zoom, rng):
    s = max(w / img.width, h / img.height) * zoom
    img = img.resize((round(img.width * s), round(img.height * s)), Image.LANCZOS)
    left, top = rng.randint(0, img.width - w), rng.randint(0, img.height - h)
    return img.crop((left, top, left + w, top + h))


def street(rng, photo, zoom):
    """Small signs a little lighter or darker than the wall they hang on, then a camera's blur."""
    img = cover(Image.open(photo).convert("RGB"), 1280, 720, zoom, rng)
    d = ImageDraw.Draw(img)
    texts = []
    for _ in range(8):
        f = font(rng.randint(11, 18), rng.random() < 0.5)
        text = rng.choice(SIGNS)
        texts.append(text)
        x, y = rng.randint(20, 1050), rng.randint(20, 670)
        bb = d.textbbox((x, y), text, font=f)
        plate = (bb[0] - 6, bb[1] - 4, bb[2] + 6, bb[3] + 4)
        wall = img.crop(plate).resize((1, 1), Image.BOX).getpixel((0, 0))
        bg = tuple(max(0, min(255, c + rng.randint(-25, 25))) for c in wall)
        delta = rng.choice([-1, 1]) * rng.randint(25, 60)
        d.rectangle(plate, fill=bg)
        d.text((x, y), text, font=f, fill=tuple(max(0, min(255, c + delta)) for c in bg))
    return img.filter(ImageFilter.GaussianBlur(0.6)), texts


def page(rng, i):
    """A book page: justified-looking lines of a serif text on off-white, dark grey ink."""
    f = ImageFont.truetype(SERIF, rng.choice([24, 26, 28]))
    img = Image.new("L", (1000, 900), rng.randint(236, 250))
    d = ImageDraw.Draw(img)
    words = PAGE.split(" ")
    start = rng.randrange(len(words))
    words = words[start:] + words[:start]
    lines, cur = [], ""
    for w in words:
        if d.textlength(cur + " " + w, font=f) > 900 and cur:
            lines.append(cur)
            cur = w
        else:
            cur = (cur + " " + w).strip()
    lines.append(cur)
    ink = rng.randint(10, 50)
    for k, line in enumerate(lines[:12]):
        d.text((50, 40 + 70 * k), line, font=f, fill=ink)
    return img


def strip(rng, text):
    img = Image.new("RGB", (1167, 54), tuple(rng.randint(238, 255) for _ in range(3)))
    ImageDraw.Draw(img).text((rng.randint(0, 3), rng.randint(6, 14)), text,
                             font=ImageFont.truetype(CJK, rng.choice([24, 28, 32])),
                             fill=tuple(rng.randint(0, 60) for _ in range(3)))
    return img


def make_real(out, rng):
    n = 0
    truth = {}
    for i, photo in enumerate(skimage_photos()):
        for k, (zoom, quality) in enumerate([(1.0, 80), (1.4, 75), (1.2, 85)]):
            img, texts = street(rng, photo, zoom)
            name = f"street_{3 * i + k}.jpg"
            img.save(os.path.join(out, name), quality=quality, subsampling="4:2:0")
            truth[name] = texts
            n += 1
    # Word-level ground truth of the street scenes (the signs drawn, overlapping ones included),
    # beside the folder so that the folder holds only images.
    with open(out.rstrip("/") + ".truth.json", "w") as f:
        json.dump(truth, f, indent=1)
    for i in range(6):
        # A grey page saved as palette ("P") keeps a grey palette; half get a tRNS entry for an
        # index the page does not use, as PNG optimisers leave it.
        p = page(rng, i).convert("P")
        kw = {"transparency": 0} if i % 2 else {}
        p.save(os.path.join(out, f"page_{i}.jpg"), format="PNG", **kw)
        n += 1
    for i, text in enumerate(STRIPS + STRIPS[::-1]):
        strip(rng, text).save(os.path.join(out, f"strip_{i}." + ("jpg" if i % 2 == 0 else "png")), quality=75)
        n += 1
    print(f"images: {n} in {out}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--real", action="store_true", help="the real-image set (street, page, strip)")
    a = ap.parse_args()
    rng = random.Random(a.seed)
    os.makedirs(a.out, exist_ok=True)
    if a.real:
        return make_real(a.out, rng)
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
