"""Named font sets of bench/ocr_fonts.py (`--font-set NAME`): which fonts to train on and
which to hold out, by file name without suffix (bench/ocr_tesseract.py: pick_fonts).

`debian-wide` takes Debian's font packages (bookworm; docs/benchmarks.md names them and the
folders). A held-out design never appears in training under another name: URW Gothic's clone
TeX Gyre Adventor, C059's clone TeX Gyre Schola, PT Sans's Caption and Narrow cuts, every Noto
Sans and Cabin, Lato, Charis SIL, Linux Libertine and Inconsolata cut stay out of TRAIN.
"""

DEBIAN_WIDE_TRAIN = (
    # humanist and grotesque sans
    "DejaVuSans", "DejaVuSans-Bold", "DejaVuSans-Oblique", "DejaVuSansCondensed",
    "LiberationSans-Regular", "LiberationSans-Bold", "LiberationSansNarrow-Regular",
    "FreeSans", "FreeSansBold", "NimbusSans-Regular", "NimbusSans-Bold",
    "NimbusSansNarrow-Regular", "texgyreheros-regular", "Carlito-Regular", "Carlito-Bold",
    "Roboto-Regular", "Roboto-Bold", "Roboto-Italic", "RobotoCondensed-Regular",
    "OpenSans-Regular", "OpenSans-Bold", "Cantarell-Regular", "Oxygen-Sans",
    "LinBiolinum_R", "GilliusADF-Regular", "SwitzeraADF-Regular",
    "UniversalisADFStd-Regular", "VeranaSans-Regular", "Mplus1-Regular", "Mplus2-Medium",
    "lmsans10-regular",
    # geometric and rounded sans (single-storey a, bare t)
    "Comfortaa-Regular", "Comfortaa-Bold", "LeagueSpartan-Regular", "LeagueSpartan-Bold",
    "Quicksand-Medium", "Quicksand-Bold", "Dosis-Medium", "Jura-Medium", "Andika-Regular",
    # serif
    "DejaVuSerif", "DejaVuSerif-Bold", "LiberationSerif-Regular", "LiberationSerif-Italic",
    "FreeSerif", "FreeSerifBold", "NimbusRoman-Regular", "NimbusRoman-Italic", "P052-Roman",
    "P052-Italic", "URWBookman-Light", "URWBookman-Demi", "texgyretermes-regular",
    "texgyrepagella-regular", "texgyrebonum-regular", "NotoSerif-Regular", "NotoSerif-Bold",
    "EBGaramond12-Regular", "Gentium-R", "PTF55F", "AccanthisADFStd-Regular",
    "BaskervaldADFStd", "lmroman10-regular", "STIX-Regular", "JunicodeTwoBeta-Regular",
    # monospaced
    "DejaVuSansMono", "LiberationMono-Regular", "FreeMono", "NimbusMonoPS-Regular",
    "texgyrecursor-regular", "FiraCode-Regular", "PTM55F", "lmmono10-regular",
)
DEBIAN_WIDE_HELD_OUT = (
    "URWGothic-Book", "C059-Roman", "Caladea-Regular", "NotoSans-Regular", "Lato-Regular",
    "CharisSIL-Regular", "Cabin-Regular", "PTS55F", "LinLibertine_R", "Inconsolata",
)
DEBIAN_WIDE_DIRS = ("/usr/share/fonts", "/usr/share/texmf/fonts/opentype")

SETS = {"debian-wide": (DEBIAN_WIDE_TRAIN, DEBIAN_WIDE_HELD_OUT, DEBIAN_WIDE_DIRS)}
