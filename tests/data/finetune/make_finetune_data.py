"""Writes the fine-tuning test data in this directory (run it from the repository root).

data/topics/{train,dev,test}.tsv (the README's walk-through data, at the repository root):
short sentences about sports or food (tab separated, header
`sentence<TAB>label`; test.tsv has no label column). Each sentence is a neutral template
("we spent the whole afternoon on {x}.") around a topical phrase. The train and dev sets
share NO topical phrase and NO template, so the only way to label a dev sentence is to know
what its (unseen) phrase is about: a pre-trained encoder knows that "the hockey playoffs"
are sport, a randomly initialised one has never seen those words trained and stays near
chance. 240 train, 80 dev, 8 test sentences.

squad_small.json: a SQuAD v1.1 file written for the tests, four paragraphs (one long enough
to need several windows at max_seq_length 64) and twelve questions; every answer_start is
computed here from the answer text, so it is right by construction.

All text was written for this project (no external source).
"""

import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))

TRAIN_TEMPLATES = [
    "my friend keeps talking about {x}.",
    "we spent the whole afternoon on {x}.",
    "the article this morning was about {x}.",
    "everyone at work was discussing {x}.",
    "i have never cared much for {x}.",
    "she wrote a long letter about {x}.",
    "they asked me what i thought of {x}.",
    "there was a documentary about {x} on tv.",
    "he called me yesterday to talk about {x}.",
    "the whole town was excited about {x}.",
]
DEV_TEMPLATES = [
    "my neighbour told me a story about {x}.",
    "the podcast last night was about {x}.",
    "we argued for an hour about {x}.",
    "grandma still remembers {x} from her childhood.",
    "nobody in my family likes {x}.",
]
PHRASES = {
    "sports": {
        "train": ["the football match", "the tennis final", "the basketball game",
                  "the new striker", "the referee's decision", "the marathon race",
                  "the cycling tour", "the swimming championship", "the boxing match",
                  "the ski jump competition", "the golf tournament", "the olympic sprinters"],
        "dev": ["the hockey playoffs", "the baseball season", "the rugby team",
                "the volleyball league", "the cricket test series", "the wrestling bout",
                "the goalkeeper's save", "the formula one grand prix"],
        "test": ["the soccer world cup", "the badminton players", "the skating rink",
                 "the javelin throw"],
    },
    "food": {
        "train": ["the chocolate cake", "the pasta recipe", "the tomato soup",
                  "the fresh bread", "the grilled salmon", "the vegetable curry",
                  "the pizza place", "the apple pie", "the cheese omelette",
                  "the spicy noodles", "the fruit salad", "the roast chicken"],
        "dev": ["the sushi restaurant", "the blueberry muffins", "the lentil stew",
                "the garlic shrimp", "the pancake breakfast", "the beef burritos",
                "the lemon tart", "the mushroom risotto"],
        "test": ["the strawberry jam", "the fried rice", "the onion rings",
                 "the peach cobbler"],
    },
}
TEST_TEMPLATE = "i read something about {x} today."

SQUAD_PARAGRAPHS = [
    ("The Harbor Lighthouse was built in 1872 by the engineer Margaret Ellison. It stands "
     "on a granite cliff north of the old fishing village of Penwick and its lamp can be "
     "seen twenty miles out at sea.",
     [("q-built", "When was the Harbor Lighthouse built?", "1872"),
      ("q-engineer", "Who built the Harbor Lighthouse?", "Margaret Ellison"),
      ("q-village", "Which village is the lighthouse near?", "Penwick")]),
    ("Copper kettles were the pride of the Vance family bakery. Every morning at five "
     "o'clock, Thomas Vance lit the ovens and baked rye loaves for the market in Dunmore.",
     [("q-baker", "Who lit the ovens?", "Thomas Vance"),
      ("q-loaves", "What kind of loaves were baked?", "rye"),
      ("q-market", "Where was the market?", "Dunmore")]),
    ("The river Alder rises in the Greyfell hills and flows east for ninety kilometres. "
     "Along the way it passes the market town of Selby Cross, where a stone bridge with "
     "seven arches has carried the road since the fourteenth century. Below the bridge the "
     "valley widens into water meadows that flood every winter, and in spring the meadows "
     "are full of herons, lapwings and curlews. The river finally reaches the sea at "
     "Aldermouth, a small port that once shipped wool and slate to the continent. Today "
     "the port is used mostly by sailing boats, and the old customs house has become a "
     "museum about the history of the valley.",
     [("q-rises", "Where does the river Alder rise?", "the Greyfell hills"),
      ("q-arches", "How many arches does the bridge have?", "seven"),
      ("q-port", "Where does the river reach the sea?", "Aldermouth"),
      ("q-museum", "What has the old customs house become?", "a museum")]),
    ("In the chess club final, Priya Raman defeated Jonas Weller in forty-one moves.",
     [("q-winner", "Who won the chess club final?", "Priya Raman"),
      ("q-moves", "How many moves did the final take?", "forty-one")]),
]


def write_topics():
    directory = os.path.join(HERE, "..", "..", "..", "data", "topics")
    os.makedirs(directory, exist_ok=True)
    for split, templates in (("train", TRAIN_TEMPLATES), ("dev", DEV_TEMPLATES)):
        rows = []
        for label, phrases in PHRASES.items():
            for phrase in phrases[split]:
                rows.extend((template.format(x=phrase), label) for template in templates)
        # Interleave the classes deterministically (the trainer shuffles anyway).
        rows.sort(key=lambda row: (hash_text(row[0]), row[0]))
        with open(os.path.join(directory, f"{split}.tsv"), "w", encoding="utf-8") as f:
            f.write("sentence\tlabel\n")
            f.writelines(f"{sentence}\t{label}\n" for sentence, label in rows)
    with open(os.path.join(directory, "test.tsv"), "w", encoding="utf-8") as f:
        f.write("sentence\n")
        for label in PHRASES:
            f.writelines(TEST_TEMPLATE.format(x=phrase) + "\n"
                         for phrase in PHRASES[label]["test"])


def hash_text(text):
    """A stable (not salted) small hash, for a reproducible order."""
    value = 0
    for char in text:
        value = (value * 131 + ord(char)) % 1000003
    return value


def write_squad():
    paragraphs = []
    for context, questions in SQUAD_PARAGRAPHS:
        qas = []
        for qid, question, answer in questions:
            start = context.index(answer)
            qas.append({"id": qid, "question": question,
                        "answers": [{"text": answer, "answer_start": start}]})
        paragraphs.append({"context": context, "qas": qas})
    dataset = {"version": "1.1", "data": [{"title": "small", "paragraphs": paragraphs}]}
    with open(os.path.join(HERE, "squad_small.json"), "w", encoding="utf-8") as f:
        json.dump(dataset, f, indent=1, ensure_ascii=False)
        f.write("\n")


if __name__ == "__main__":
    write_topics()
    write_squad()
