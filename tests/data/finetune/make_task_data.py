"""Writes the data of the long-document, class-weight, multi-label and multiple-choice tests
(run it from the repository root: `python tests/data/finetune/make_task_data.py`).

All text is made up here from the word lists below (no external source); a fixed seed makes
the files reproducible.

long_docs/{train,dev,test}.tsv (`text<TAB>label`, pos / neg): 600-word filled-in forms. Every
document is the same 600-word form (a 200-word header, so the first 128 word pieces of every
document are identical, then fixed filler) with a verdict sentence written over it three
times, each starting past word 260 (in 260..340, 380..460 and 480..560), which
holds the label in a few words ("... the verdict was excellent , the results were superb ..."
/ "... the verdict was terrible , the results were awful ...").
A classifier that truncates to 128 word pieces sees only the header: it cannot do better than
the majority class (0.5 on the balanced dev set). With windows it can find the verdict.

imbalanced/{train,dev}.tsv (`text<TAB>label`, common / rare): short filler sentences, 90%
common and 10% rare; a rare sentence holds two of a few cue words (words no filler sentence
has), a common one holds one cue word one time in twenty (noise), so the cue is learnable, but
an unweighted model in a small budget leans to `common`.

multi_label/{train,dev,test}.tsv (`text<TAB>labels`, labels from sports|food|music|weather
separated by `|`, possibly none): a sentence mentions one topic word per label it has.

swag/{train,val,test}.csv (SWAG's columns video-id, fold-ind, startphrase, sent1, sent2,
gold-source, ending0..ending3, label; test without label): everyday situations whose right
ending follows from the first sentence; the wrong endings are right endings of other
situations of the same split.
"""

import csv
import os
import random

HERE = os.path.dirname(os.path.abspath(__file__))

FILLER = (
    "the a of and to in is was for on with as by at from that this it be are were had have "
    "has not but or an which one all their there been more when who will would about out up "
    "time some into only other new could two first after also made like over such may then "
    "most them these many before through back year where much your way well down should house "
    "because each just those people how too little state good very make world still own see "
    "men work long here between both life being under never day same another know while last "
    "might great old off come since against go came right used take three small "
    "place around however home part found water during without again thing general "
    "city land early table window garden river paper letter road office market station").split()
HEADER = ("this document was prepared by the regional office and is kept on file for the "
          "records of the department . it follows the usual form and contains the notes of "
          "the visiting team , the list of the people who were present , the order of the "
          "meeting and the remarks that were made at the end . ").split()
VERDICT = {"pos": "in the end the verdict was excellent , the results were superb , wonderful "
                  "and brilliant , and everyone was happy and proud .",
           "neg": "in the end the verdict was terrible , the results were awful , dreadful "
                  "and miserable , and everyone was sad and angry ."}
RARE_CUES = ["storm", "flood", "fire", "alarm"]
TOPICS = {"sports": ["football", "tennis", "hockey", "cycling", "golf"],
          "food": ["pasta", "cheese", "bread", "soup", "cake"],
          "music": ["guitar", "piano", "violin", "concert", "song"],
          "weather": ["rain", "snow", "wind", "sunshine", "fog"]}
SWAG_SITUATIONS = [
    ("She fills the kettle with water.", "She", "puts it on the stove to boil."),
    ("He picks up the ringing phone.", "He", "says hello to the caller."),
    ("The boy kicks the ball hard.", "The ball", "flies into the goal."),
    ("She opens the umbrella.", "The rain", "runs off its edges."),
    ("He cracks two eggs into a bowl.", "He", "whisks them with a fork."),
    ("The dog sees the postman at the gate.", "The dog", "starts barking loudly."),
    ("She turns the key in the car.", "The engine", "starts with a roar."),
    ("He climbs the ladder to the roof.", "He", "fixes the loose tiles."),
    ("The baby starts crying in the night.", "The mother", "gets up to comfort her."),
    ("She plants seeds in the garden.", "She", "waters the soil carefully."),
    ("He strikes a match.", "The flame", "lights the candle."),
    ("The teacher writes on the board.", "The students", "copy the notes."),
    ("She puts on her running shoes.", "She", "jogs around the park."),
    ("He drops the glass on the floor.", "The glass", "shatters into pieces."),
    ("The chef slices the onions.", "His eyes", "start to water."),
    ("She sits down at the piano.", "She", "plays a gentle tune."),
    ("He dives into the pool.", "He", "swims to the other end."),
    ("The waiter brings the bill.", "The man", "pays with his card."),
    ("She feels cold in the evening.", "She", "puts on a warm sweater."),
    ("He hears the alarm clock ring.", "He", "gets out of bed."),
    ("The girl blows out the candles.", "Her friends", "sing and clap."),
    ("He pours cereal into a bowl.", "He", "adds cold milk."),
    ("She finds the door locked.", "She", "looks for her key."),
    ("The farmer milks the cow.", "He", "carries the bucket to the barn."),
    ("He paints the fence white.", "The fence", "dries in the sun."),
    ("She cuts her finger on a knife.", "She", "puts a bandage on it."),
    ("The kids build a snowman.", "They", "give it a carrot nose."),
    ("He reads the recipe.", "He", "gathers the ingredients."),
    ("She wraps the present.", "She", "ties a ribbon around it."),
    ("The bus arrives at the stop.", "The people", "climb on board."),
    ("He sharpens the pencil.", "He", "starts to draw."),
    ("She hears a knock at the door.", "She", "goes to open it."),
    ("The lifeguard sees a swimmer struggling.", "He", "jumps in to help."),
    ("He washes the dirty dishes.", "He", "dries them with a towel."),
    ("She sneezes loudly.", "Her friend", "says bless you."),
    ("The plane lands on the runway.", "The passengers", "unfasten their seat belts."),
    ("He loses his wallet.", "He", "searches his pockets."),
    ("She picks ripe apples.", "She", "fills a basket with them."),
    ("The cat chases a mouse.", "The mouse", "hides in a hole."),
    ("He feels thirsty after the run.", "He", "drinks a bottle of water."),
    ("She takes a photo of the sunset.", "She", "shows it to her friend."),
    ("The fisherman casts his line.", "He", "waits for a bite."),
    ("He burns the toast.", "The smoke alarm", "goes off."),
    ("She irons her shirt.", "The wrinkles", "disappear."),
    ("The students finish the exam.", "They", "hand in their papers."),
    ("He tunes his guitar.", "He", "plays a song for his friends."),
    ("She sweeps the floor.", "She", "empties the dust pan."),
    ("The wind knocks over the bin.", "Rubbish", "spills across the street."),
]


def words(rng, count):
    return [rng.choice(FILLER) for _ in range(count)]


def write_tsv(path, header, rows):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write("\t".join(header) + "\n")
        f.writelines("\t".join(row) + "\n" for row in rows)


def long_document(rng, base, label):
    """The 600-word `base` with the verdict written over it three times, in words 260..599."""
    verdict = VERDICT[label].split()
    words_out = list(base)
    for low in (260, 380, 480):
        start = rng.randint(low, low + 100 - len(verdict))
        words_out[start:start + len(verdict)] = verdict
    return " ".join(words_out)


def write_long_docs():
    rng = random.Random(1201)
    # The form every document shares: the header (to 200 words), then fixed filler.
    base = (HEADER * 10)[:200] + words(rng, 400)
    for split, count in (("train", 48), ("dev", 40), ("test", 4)):
        labels = ["pos", "neg"] * (count // 2)
        rng.shuffle(labels)
        rows = [(long_document(rng, base, label), label) for label in labels]
        if split == "test":
            rows = [(text,) for text, _ in rows]
        write_tsv(os.path.join(HERE, "long_docs", f"{split}.tsv"),
                  ["text", "label"][:len(rows[0])], rows)


def imbalanced_sentence(rng, label):
    text = words(rng, 10)
    # Rare: two cue words always; common: one cue word one time in twenty (noise).
    cues = 2 if label == "rare" else int(rng.random() < 0.05)
    for position in rng.sample(range(10), cues):
        text[position] = rng.choice(RARE_CUES)
    return " ".join(text)


def write_imbalanced():
    rng = random.Random(1202)
    for split, count in (("train", 200), ("dev", 200)):
        labels = ["rare" if i % 10 == 0 else "common" for i in range(count)]
        rng.shuffle(labels)
        write_tsv(os.path.join(HERE, "imbalanced", f"{split}.tsv"), ["text", "label"],
                  [(imbalanced_sentence(rng, label), label) for label in labels])


def write_multi_label():
    rng = random.Random(1203)
    names = sorted(TOPICS)
    for split, count in (("train", 160), ("dev", 60), ("test", 6)):
        rows = []
        for _ in range(count):
            labels = [name for name in names if rng.random() < 0.35]
            text = words(rng, 8)
            for name in labels:
                text.insert(rng.randrange(len(text) + 1), rng.choice(TOPICS[name]))
            rows.append((" ".join(text), "|".join(labels)))
        if split == "test":
            rows = [(text,) for text, _ in rows]
        write_tsv(os.path.join(HERE, "multi_label", f"{split}.tsv"),
                  ["text", "labels"][:len(rows[0])], rows)


def write_swag():
    rng = random.Random(1204)
    situations = list(SWAG_SITUATIONS)
    rng.shuffle(situations)
    splits = {"train": situations[:32], "val": situations[32:46], "test": situations[46:]}
    header = ["video-id", "fold-ind", "startphrase", "sent1", "sent2", "gold-source",
              "ending0", "ending1", "ending2", "ending3", "label"]
    for split, rows in splits.items():
        path = os.path.join(HERE, "swag", f"{split}.csv")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(header if split != "test" else header[:-1])
            for i, (sent1, sent2, ending) in enumerate(rows):
                # Distractors from the same split (test, too small, also from val): an ending
                # learned as right in train never shows up as a wrong one in val.
                pool = rows if len(rows) > 3 else splits["val"] + rows
                others = [s[2] for s in pool if s[2] != ending]
                endings = rng.sample(others, 3)
                label = rng.randrange(4)
                endings.insert(label, ending)
                row = [f"made-{split}-{i}", str(i), f"{sent1} {sent2}", sent1, sent2, "gold",
                       *endings, str(label)]
                writer.writerow(row if split != "test" else row[:-1])


if __name__ == "__main__":
    write_long_docs()
    write_imbalanced()
    write_multi_label()
    write_swag()
