"""Procedural dialogues for the demo model: templates with varied slots, so that the model learns to
answer the question asked (the slot it names) instead of reciting a memorised answer, to carry a
fact from an earlier turn to a later question, and to write short pieces about the topic it is
given. Deterministic for a given random.Random."""

NAMES = ["Alice", "Bob", "Carol", "David", "Emma", "Frank", "Grace", "Henry", "Irene", "Jack", "Karen",
         "Leo", "Maria", "Nina", "Oscar", "Paul", "Quinn", "Rosa", "Sam", "Tara", "Uma", "Victor", "Wendy",
         "Xavier", "Yara", "Zoe", "Anna", "Ben", "Chloe", "Daniel", "Eva", "Felix", "Hannah", "Ivan", "Julia",
         "Kevin", "Laura", "Mark", "Olivia", "Peter", "Ruth", "Simon", "Tom", "Vera", "Will", "Amir", "Lena",
         "Mei", "Noah", "Priya", "Sofia", "Omar", "Kenji", "Ines", "Lars", "Fatima", "Diego", "Ada"]
CITIES = ["Paris", "London", "Berlin", "Madrid", "Rome", "Lisbon", "Vienna", "Oslo", "Dublin", "Prague",
          "Tokyo", "Boston", "Chicago", "Toronto", "Sydney", "Cairo", "Athens", "Warsaw", "Zurich", "Seattle",
          "Denver", "Lyon", "Munich", "Osaka", "Austin", "Leeds", "Porto", "Milan", "Geneva", "Helsinki"]
COLOURS = ["red", "blue", "green", "yellow", "purple", "orange", "black", "white", "pink", "brown", "grey"]
PETS = ["dog", "cat", "rabbit", "parrot", "hamster", "horse", "goldfish", "turtle"]
PET_NAMES = ["Max", "Bella", "Charlie", "Luna", "Rocky", "Daisy", "Milo", "Coco", "Buddy", "Pepper",
             "Oscar", "Ginger", "Biscuit", "Shadow", "Sunny", "Toby"]
FOODS = ["pizza", "pasta", "rice", "soup", "apples", "bread", "cheese", "chocolate", "noodles", "salad"]
JOBS = ["teacher", "doctor", "nurse", "pilot", "baker", "farmer", "painter", "programmer", "writer", "chef"]
CAPITALS = [("France", "Paris"), ("Germany", "Berlin"), ("Italy", "Rome"), ("Spain", "Madrid"),
            ("Portugal", "Lisbon"), ("Japan", "Tokyo"), ("China", "Beijing"), ("Russia", "Moscow"),
            ("Egypt", "Cairo"), ("Canada", "Ottawa"), ("Australia", "Canberra"), ("Austria", "Vienna"),
            ("Norway", "Oslo"), ("Sweden", "Stockholm"), ("Finland", "Helsinki"), ("Denmark", "Copenhagen"),
            ("Ireland", "Dublin"), ("Poland", "Warsaw"), ("Greece", "Athens"), ("Hungary", "Budapest"),
            ("Belgium", "Brussels"), ("the Netherlands", "Amsterdam"), ("Switzerland", "Bern"),
            ("Turkey", "Ankara"), ("India", "New Delhi"), ("Brazil", "Brasilia"), ("Argentina", "Buenos Aires"),
            ("Mexico", "Mexico City"), ("Peru", "Lima"), ("Chile", "Santiago"), ("Kenya", "Nairobi"),
            ("Nigeria", "Abuja"), ("Morocco", "Rabat"), ("Thailand", "Bangkok"), ("Vietnam", "Hanoi"),
            ("South Korea", "Seoul"), ("Indonesia", "Jakarta"), ("Iran", "Tehran"), ("Cuba", "Havana"),
            ("Colombia", "Bogota"), ("Ukraine", "Kyiv"), ("the Czech Republic", "Prague"),
            ("Scotland", "Edinburgh"), ("Wales", "Cardiff"), ("Iceland", "Reykjavik"), ("New Zealand", "Wellington")]
OPPOSITES = [("hot", "cold"), ("big", "small"), ("fast", "slow"), ("up", "down"), ("day", "night"),
             ("happy", "sad"), ("old", "young"), ("open", "closed"), ("light", "dark"), ("wet", "dry"),
             ("early", "late"), ("full", "empty"), ("hard", "soft"), ("loud", "quiet"), ("rich", "poor"),
             ("long", "short"), ("strong", "weak"), ("clean", "dirty"), ("high", "low"), ("left", "right")]
THING_COLOURS = [("a banana", "yellow"), ("the sky", "blue"), ("grass", "green"), ("snow", "white"),
                 ("coal", "black"), ("a tomato", "red"), ("an orange", "orange"), ("a lemon", "yellow"),
                 ("the sea", "blue"), ("a strawberry", "red"), ("milk", "white"), ("a leaf", "green"),
                 ("chocolate", "brown"), ("a carrot", "orange"), ("a plum", "purple"), ("an elephant", "grey")]
# topic: (a plural or mass noun phrase, an adjective, what it does, where)
TOPICS = {
    "rain": ("the rain", "soft", "falls on the roof", "the quiet street"),
    "the sea": ("the sea", "deep", "rolls onto the sand", "the shore"),
    "the moon": ("the moon", "pale", "climbs over the hills", "the night sky"),
    "the sun": ("the sun", "warm", "rises over the fields", "the morning sky"),
    "snow": ("the snow", "white", "covers the sleeping town", "the hills"),
    "autumn": ("the autumn leaves", "golden", "drift down from the trees", "the park"),
    "spring": ("the spring flowers", "bright", "open in the sun", "the garden"),
    "winter": ("the winter wind", "cold", "sings through the pines", "the frozen lake"),
    "summer": ("the summer heat", "lazy", "hangs over the fields", "the long afternoon"),
    "the wind": ("the wind", "restless", "moves through the grass", "the open plain"),
    "a cat": ("the cat", "sleepy", "curls up by the fire", "the warm kitchen"),
    "a dog": ("the dog", "happy", "runs after the ball", "the green park"),
    "the city": ("the city", "busy", "hums with a thousand lights", "the crowded streets"),
    "the forest": ("the forest", "green", "whispers in the breeze", "the tall old trees"),
    "a river": ("the river", "silver", "winds toward the sea", "the valley"),
    "mountains": ("the mountains", "tall", "stand above the clouds", "the far horizon"),
    "coffee": ("the coffee", "dark", "steams in the cup", "the early morning"),
    "friendship": ("a friend", "kind", "stays by your side", "the hard days"),
    "the stars": ("the stars", "distant", "shine over the sleeping world", "the dark sky"),
    "a garden": ("the garden", "quiet", "grows a little every day", "the sunny yard"),
    "the night": ("the night", "still", "wraps the world in blue", "the empty road"),
    "birds": ("the birds", "small", "sing at the break of day", "the branches"),
    "a train": ("the train", "long", "rushes past the fields", "the iron tracks"),
    "the ocean": ("the ocean", "endless", "breathes in slow waves", "the rocky coast"),
    "flowers": ("the flowers", "sweet", "turn their faces to the sun", "the meadow"),
    "a storm": ("the storm", "wild", "shakes the windows", "the dark hills"),
    "books": ("an old book", "worn", "opens a door to other worlds", "the library"),
    "music": ("the music", "gentle", "fills the room", "the evening"),
    "the morning": ("the morning light", "fresh", "spills across the floor", "the window"),
    "love": ("love", "patient", "grows in small kind acts", "every home"),
    "a tree": ("the tree", "old", "spreads its arms wide", "the hill"),
    "fire": ("the fire", "bright", "crackles in the dark", "the camp"),
    "clouds": ("the clouds", "soft", "sail across the sky", "the blue above"),
    "the desert": ("the desert", "dry", "glows under the sun", "the endless sand"),
    "the city at night": ("the city at night", "glittering", "never quite sleeps", "the neon streets"),
    "a robot": ("the little robot", "curious", "learns something new each day", "the workshop"),
    "computers": ("the computer", "patient", "hums and thinks all day", "the desk"),
    "a cup of tea": ("the tea", "warm", "waits in its cup", "the quiet table"),
}
# Any other topic: pieces that name it (copied from the request) around lines that fit anything.
OTHER_TOPICS = ["bicycles", "my grandmother", "a lighthouse", "cheese", "the bus", "homework", "a kite", "bread",
                "the library", "a bridge", "the weekend", "candles", "an old clock", "my dog", "the harbour",
                "a lost key", "tomatoes", "the school", "a red balloon", "dragons", "the piano", "Mondays",
                "a quiet village", "the mountains in winter", "soup", "my best friend", "a paper boat",
                "the market", "windows", "a long walk", "the first day of school", "pancakes", "a castle",
                "the football match", "a sleepy owl", "my garden", "the rainforest", "a tiny mouse", "honey",
                "the bakery", "a thunderstorm", "the beach", "a blue door", "my home town", "chess", "the post office",
                "a violin", "a snowman", "the harvest", "a sailing ship", "lemons", "a busy kitchen", "the airport",
                "shoes", "a hot summer day", "the office", "a green apple", "the village fair", "umbrellas", "a fox",
                "the last train", "my teacher", "an empty room", "a fountain", "the weekend market", "maps",
                "a birthday party", "the zoo", "a mountain lake", "pizza", "a letter", "the stars at sea", "a pencil",
                "tea with friends", "the hospital", "a broken radio", "the old road", "penguins", "mushrooms",
                "the circus", "a lonely tree", "my cat", "a new job", "the dentist", "fireflies", "a small boat"]
PLAIN_LINES = ["the morning is quiet", "a small wind moves on", "the light comes slowly", "time passes softly",
               "the world is still", "near and far at once", "a bird sings somewhere", "the day goes by",
               "all of it is good", "I close my eyes", "the evening is warm", "something new begins",
               "the hours go slowly", "I smile again", "the sky is wide", "a song without words"]
FILLERS = [("What is 2 plus 2?", "2 plus 2 is 4."), ("Tell me a joke.", "Why did the computer go to the doctor? It had a virus."),
           ("How are you?", "I am fine, thank you. How can I help?"), ("What day comes after Monday?", "Tuesday comes after Monday."),
           ("Is the sun a star?", "Yes, the sun is a star."), ("What colour is the sky?", "The sky is blue on a clear day."),
           ("Can you help me?", "Of course. What do you need?"), ("Thanks!", "You are welcome!"),
           ("What is water made of?", "Water is made of hydrogen and oxygen."), ("How many days are in a week?", "There are seven days in a week.")]
# Made-up names and places (syllables), drawn for half of the remembered facts: with only a list to
# choose from the model learns a guess; with names it has never seen it has to copy the one it was told.
SYLLABLES = ["ka", "lo", "mi", "ra", "ten", "vo", "shi", "dan", "el", "bri", "tor", "na", "qui", "zu", "fen",
             "ha", "mar", "is", "ju", "pe", "ol", "san", "dri", "go", "wy", "let", "cor", "um", "bel", "ash"]
PLACE_ENDS = ["ton", "ville", "burg", "ford", "holm", "mouth", "stad", "field", "port", "dale"]
HOBBIES = ["chess", "painting", "running", "swimming", "cooking", "reading", "gardening", "singing", "cycling",
           "knitting", "fishing", "dancing", "hiking", "photography", "the guitar", "the piano"]
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December"]
ANIMALS = ["the fox", "the owl", "the whale", "the tiger", "the penguin", "the dolphin", "the wolf", "the bear",
           "the eagle", "the otter", "the lion", "the zebra"]
RELATIVES = ["sister", "brother", "friend", "daughter", "son", "cousin", "neighbour", "boss"]
NUMBER_WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
                "twelve"]


def cap(s):
    return s[:1].upper() + s[1:]


def made_name(rng):
    return cap("".join(rng.choice(SYLLABLES) for _ in range(rng.choice([2, 2, 3]))))


def person(rng):
    return rng.choice(NAMES) if rng.random() < 0.5 else made_name(rng)


def place(rng):
    return rng.choice(CITIES) if rng.random() < 0.6 else made_name(rng) + rng.choice(PLACE_ENDS)


FACT_KINDS = 11


def fact_kinds(rng, kind=None):
    """(statement, acknowledgement, questions, answer) for one remembered fact of kind (0-10)."""
    if kind is None:
        kind = rng.randrange(FACT_KINDS)
    if kind == 0:
        n = person(rng)
        return (rng.choice([f"My name is {n}.", f"Hi, I'm {n}.", f"Hello, my name is {n}.", f"Call me {n}.",
                            f"I am {n}."]),
                rng.choice([f"Nice to meet you, {n}! How can I help you?", f"Hello, {n}! What can I do for you?",
                            f"Hi {n}, nice to meet you."]),
                ["What is my name?", "Do you remember my name?", "What's my name?", "Who am I?",
                 "Can you tell me my name?"],
                f"Your name is {n}.")
    if kind == 1:
        c = place(rng)
        return (rng.choice([f"I live in {c}.", f"I am from {c}.", f"My home is in {c}."]),
                rng.choice([f"{c} sounds like a nice place to live.", f"Nice! What is it like in {c}?",
                            f"Thanks for telling me. How can I help?"]),
                ["Where do I live?", "Which city do I live in?", "Do you remember where I live?"],
                f"You live in {c}.")
    if kind == 2:
        c = rng.choice(COLOURS)
        return (rng.choice([f"My favourite colour is {c}.", f"I really like the colour {c}."]),
                rng.choice([f"{cap(c)} is a lovely colour.", "That is a nice choice."]),
                ["What is my favourite colour?", "Which colour do I like?", "Do you remember my favourite colour?"],
                f"Your favourite colour is {c}.")
    if kind == 3:
        p, pn = rng.choice(PETS), rng.choice(PET_NAMES) if rng.random() < 0.5 else made_name(rng)
        return (rng.choice([f"I have a {p} called {pn}.", f"My {p} is named {pn}."]),
                rng.choice([f"{pn} is a great name for a {p}!", f"How lovely. Tell me more about {pn}."]),
                ["What is my pet's name?", f"What is my {p} called?", "What kind of pet do I have?"],
                f"Your {p} is called {pn}.")
    if kind == 4:
        a = rng.randint(6, 90)
        return (f"I am {a} years old.", rng.choice(["Thanks for telling me.", "Got it. How can I help?"]),
                ["How old am I?", "What is my age?"], f"You are {a} years old.")
    if kind == 5:
        f = rng.choice(FOODS)
        return (rng.choice([f"My favourite food is {f}.", f"I love {f}."]),
                rng.choice([f"{cap(f)} is tasty!", f"Yum, {f} is a good choice."]),
                ["What is my favourite food?", "What food do I like?"], f"Your favourite food is {f}.")
    if kind == 7:
        h = rng.choice(HOBBIES)
        return (rng.choice([f"My hobby is {h}.", f"In my free time I love {h}."]),
                rng.choice([f"{cap(h)} is a great hobby.", "That sounds like fun."]),
                ["What is my hobby?", "What do I do in my free time?"], f"Your hobby is {h}.")
    if kind == 8:
        r, n = rng.choice(RELATIVES), person(rng)
        return (rng.choice([f"My {r} is called {n}.", f"My {r}'s name is {n}."]),
                rng.choice([f"{n} is a nice name.", f"Thanks, I will remember {n}."]),
                [f"What is my {r} called?", f"What is my {r}'s name?", f"Who is my {r}?"],
                f"Your {r} is called {n}.")
    if kind == 9:
        m = rng.choice(MONTHS)
        return (rng.choice([f"My birthday is in {m}.", f"I was born in {m}."]),
                rng.choice([f"{m} is a good month for a birthday.", "I will remember that."]),
                ["When is my birthday?", "Which month was I born in?"], f"Your birthday is in {m}.")
    if kind == 10:
        a = rng.choice(ANIMALS)
        n = rng.randint(1, 99)
        return (rng.choice([f"My lucky number is {n}.", f"I think {n} is my lucky number."]),
                rng.choice([f"{n} it is!", "Good to know."]),
                ["What is my lucky number?", "Which number is lucky for me?"], f"Your lucky number is {n}.") \
            if rng.random() < 0.5 else \
            (f"My favourite animal is {a[4:]}.", rng.choice([f"{cap(a)} is a wonderful animal.", "Nice choice."]),
             ["What is my favourite animal?", "Which animal do I like best?"], f"Your favourite animal is {a[4:]}.")
    j = rng.choice(JOBS)
    art = "an" if j[0] in "aeiou" else "a"
    return (rng.choice([f"I work as {art} {j}.", f"I am {art} {j}."]),
            rng.choice([f"Being {art} {j} sounds interesting.", f"That is a good job."]),
            ["What is my job?", "What do I do for work?"], f"You are {art} {j}.")


def interlude(rng):
    """An unrelated exchange to put between a fact and the question about it."""
    r = rng.random()
    if r < 0.4:
        return list(rng.choice(FILLERS))
    if r < 0.6:
        return arithmetic_dialogue(rng)[:2]
    if r < 0.8:
        return capital_dialogue(rng)[:2]
    return word_dialogue(rng)


def memory_dialogue(rng):
    facts = [fact_kinds(rng, k) for k in rng.sample(range(FACT_KINDS), rng.choice([1, 1, 2, 2, 3]))]
    turns = []
    for st, ack, _, _ in facts:
        turns += [st, ack]
        if rng.random() < 0.3:
            turns += interlude(rng)
    for _ in range(rng.choice([0, 1, 1, 2, 3])):
        turns += interlude(rng)
    order = list(facts)
    rng.shuffle(order)
    for _, _, qs, ans in order:
        turns += [rng.choice(qs), ans]
    if len(facts) > 1 and rng.random() < 0.3:  # everything at once
        turns += [rng.choice(["What do you remember about me?", "What have I told you about myself?"]),
                  " ".join(a for _, _, _, a in facts)]
    return turns


def stated_fact(rng):
    """One fact, said in a sentence together with a request (no separate turn)."""
    st, _, qs, ans = fact_kinds(rng)
    q, a = rng.choice(FILLERS)
    return [f"{st} {q}", a, rng.choice(qs), ans]


def recall_dialogue(rng):
    """Follow-ups that refer back to earlier turns: the question before, the answer before."""
    first = interlude(rng)
    turns = list(first)
    if rng.random() < 0.5:
        turns += interlude(rng)
    r = rng.random()
    if r < 0.35:
        q = turns[-2]
        if q.endswith("?"):
            turns += [rng.choice(["What did I just ask you?", "What was my last question?", "What did I ask?"]),
                      f"You asked: {q}"]
        else:
            turns += [rng.choice(["What did I just say?", "What was my last message?"]), f"You said: {q}"]
    elif r < 0.55 and len(turns) > 2:
        turns += [rng.choice(["What was my first question?", "What did I ask you first?"]), f"You asked: {first[0]}"]
    elif r < 0.8:
        turns += [rng.choice(["Can you say that again?", "Repeat that, please.", "Say that again."]), turns[-1]]
    else:
        w = rng.choice([made_name(rng), person(rng), place(rng)])
        turns = [f"Remember this word: {w}.", f"All right, I will remember {w}."] + turns[2:] + \
                [rng.choice(["Which word did I ask you to remember?", "What was the word?"]), f"The word was {w}."]
    return turns


def capital_dialogue(rng):
    (c1, k1), (c2, k2) = rng.sample(CAPITALS, 2)
    q = rng.choice([f"What is the capital of {c1}?", f"What's the capital of {c1}?",
                    f"Which city is the capital of {c1}?", f"Tell me the capital of {c1}."])
    turns = [q, f"The capital of {c1} is {k1}."]
    r = rng.random()
    if r < 0.4:
        turns += [rng.choice([f"And of {c2}?", f"What about {c2}?", f"And the capital of {c2}?"]),
                  f"The capital of {c2} is {k2}."]
        if rng.random() < 0.4:
            turns += ["Which country did I ask about first?", f"You asked about {c1} first."]
    elif r < 0.55:
        turns += [f"Is {k2} the capital of {c1}?", f"No. The capital of {c1} is {k1}; {k2} is the capital of {c2}."]
    return turns


def arithmetic_dialogue(rng):
    a, b = rng.randint(0, 20), rng.randint(0, 20)
    op = rng.randrange(3)
    if op == 0:
        turns = [rng.choice([f"What is {a} plus {b}?", f"What is {a} + {b}?", f"Add {a} and {b}."]), f"{a} plus {b} is {a + b}."]
    elif op == 1:
        a, b = max(a, b), min(a, b)
        turns = [rng.choice([f"What is {a} minus {b}?", f"What is {a} - {b}?"]), f"{a} minus {b} is {a - b}."]
    else:
        a, b = a % 11, b % 11
        turns = [rng.choice([f"What is {a} times {b}?", f"What is {a} x {b}?"]), f"{a} times {b} is {a * b}."]
    if rng.random() < 0.3:
        c = rng.randint(1, 10)
        total = {0: a + b, 1: a - b, 2: a * b}[op]
        turns += [f"And if I add {c}?", f"{total} plus {c} is {total + c}."]
    return turns


def haiku(rng, topic):
    noun, adj, does, where = TOPICS[topic]
    form = rng.randrange(3)
    if form == 0:
        return f"{cap(adj)} {noun} at dawn,\n{does},\nover {where}."
    if form == 1:
        return f"Look: {noun}\n{does}.\n{cap(where)} is {adj}."
    return f"In {where}\n{noun}, {adj} and slow,\n{does}."


def poem(rng, topic):
    noun, adj, does, where = TOPICS[topic]
    return rng.choice([
        f"{cap(noun)} {does},\n{adj} and free;\nout in {where}\nit sings to me.",
        f"Over {where}\n{noun} {does}.\nHow {adj} it is,\nhow {adj} and true.",
    ])


def story(rng, topic):
    noun, adj, does, where = TOPICS[topic]
    n = rng.choice(NAMES)
    return (f"Once upon a time, {n} went out to {where}. There {noun} {does}, {adj} as ever. "
            f"{n} sat down and watched for a long time, and went home happy.")


def plain_piece(rng, kind, topic):
    """A haiku (0), poem (1), story (2) or sentence (3) about any topic, naming it."""
    a, b = rng.sample(PLAIN_LINES, 2)
    if kind == 0:
        return rng.choice([f"I think of {topic},\n{a},\n{topic} in my mind.", f"Oh, {topic}:\n{a},\n{b}."])
    if kind == 1:
        return rng.choice([f"{cap(topic)}, {topic},\n{a},\n{b},\nI write of {topic}.",
                           f"A little poem about {topic}:\n{a},\n{b},\nand {topic} stays with me."])
    if kind == 2:
        n = person(rng)
        return (f"Once upon a time, {n} thought about {topic} all day. {cap(a)}, and {b}. "
                f"In the end, {topic} made {n} smile.")
    return f"{cap(topic)} is something worth a second look: {a}."


def piece(rng, kind, topic):
    if topic not in TOPICS:
        return plain_piece(rng, kind, topic)
    if kind == 0:
        return haiku(rng, topic)
    if kind == 1:
        return poem(rng, topic)
    if kind == 2:
        return story(rng, topic)
    noun, adj, does, where = TOPICS[topic]
    return f"{cap(noun)} {does}, {adj} and lovely, in {where}."


def creative_dialogue(rng, topics):
    pool = topics if rng.random() < 0.6 else OTHER_TOPICS
    topic = rng.choice(pool)
    kind = rng.randrange(4)
    ask = [[f"Write a haiku about {topic}.", f"Can you write a haiku about {topic}?", f"Haiku about {topic}, please.",
            f"A haiku on {topic}, please."],
           [f"Write a short poem about {topic}.", f"Write a poem about {topic}.",
            f"Give me a little poem about {topic}.", f"Compose a short poem about {topic}."],
           [f"Tell me a short story about {topic}.", f"Write a tiny story about {topic}.",
            f"Tell me a story about {topic}."],
           [f"Describe {topic} in one sentence.", f"Say something nice about {topic}."]][kind]
    turns = [rng.choice(ask), piece(rng, kind, topic)]
    r = rng.random()
    if r < 0.3:
        other = rng.choice(pool)
        turns += [rng.choice([f"Now one about {other}.", f"Another one, about {other}.",
                              f"Now do the same for {other}."]), piece(rng, kind, other)]
        if rng.random() < 0.4:
            turns += [rng.choice(["What was the first one about?", "Which topic did I ask for first?"]),
                      f"The first one was about {topic}."]
    elif r < 0.4:
        turns += [rng.choice(["Give it a title.", "What would you call it?"]), f"I would call it \"{cap(topic)}\"."]
    elif r < 0.5:
        turns += [rng.choice(["What was it about?", "What did I ask you to write about?"]), f"It was about {topic}."]
    return turns


def word_dialogue(rng):
    kind = rng.randrange(5)
    if kind == 0:
        w, o = rng.choice(OPPOSITES)
        if rng.random() < 0.5:
            w, o = o, w
        return [f"What is the opposite of {w}?", f"The opposite of {w} is {o}."]
    if kind == 1:
        t, c = rng.choice(THING_COLOURS)
        return [f"What colour is {t}?", f"{cap(t)} is {c}."]
    if kind == 2:
        n = rng.randint(2, 12)
        return [rng.choice([f"Count from 1 to {n}.", f"Count to {n}."]), ", ".join(str(i) for i in range(1, n + 1)) + "."]
    if kind == 3:
        w = made_name(rng) if rng.random() < 0.4 else rng.choice(NAMES + CITIES + [x for x, _ in OPPOSITES])
        return [rng.choice([f"Repeat after me: {w}.", f"Say {w}."]), f"{w}."]
    n = rng.randint(0, 12)
    return [f"How do you write {n} in words?", f"{n} is written \"{NUMBER_WORDS[n]}\"."]


def synthetic(rng, count, topics):
    """count conversations (lists of alternating user/assistant texts) of mixed kinds."""
    makers = [memory_dialogue] * 5 + [stated_fact, recall_dialogue, recall_dialogue] + [capital_dialogue] * 2 + \
             [arithmetic_dialogue] * 2 + [lambda r: creative_dialogue(r, topics)] * 4 + [word_dialogue] * 2
    return [rng.choice(makers)(rng) for _ in range(count)]


def long_context(rng, paragraphs, target_chars):
    """A system prompt of about target_chars (an agent's rules and notes: Brown paragraphs around
    one stated fact) and a conversation whose answer needs the fact or ignores the padding."""
    st, _, qs, ans = fact_kinds(rng)
    user_fact = "The user says: " + st
    proj = made_name(rng) if rng.random() < 0.5 else \
        rng.choice(["Bluebird", "Marigold", "Falcon", "Juniper", "Orion", "Pebble", "Willow", "Comet"])
    facts = [(user_fact, rng.choice(qs), ans),
             (f"The project is called {proj}.", rng.choice(["What is the project called?", "What is the name of the project?"]),
              f"The project is called {proj}.")]
    fact, q, a = rng.choice(facts)
    head = rng.choice(["You are a coding agent working in a terminal. Follow the rules and notes below.",
                       "You are Petal, a helpful assistant. Read the notes below carefully.",
                       "You are an assistant inside a developer tool. Background material follows."])
    body, n = [], 0
    while n < target_chars:
        p = paragraphs[rng.randrange(len(paragraphs))]
        body.append(p)
        n += len(p) + 2
    body.insert(rng.randrange(len(body) + 1), fact)
    system = head + "\n\n" + "\n\n".join(body)
    if rng.random() < 0.25:  # a long prompt must not derail an ordinary question either
        q, a = rng.choice(FILLERS)
    return system, [q, a]
