"""The benchmark suite behind ``python -m bench speculative --suite``: prompts built at run time
from the running interpreter's own standard library and ``pydoc_data.topics``.

Categories are Spec-Bench's six (multi-turn conversation, translation, summarization, question
answering, math reasoning, retrieval-augmented answering) plus code editing and code from scratch.
Everything is chosen from sorted lists with seeded generators, so one interpreter version always
builds the same suite; ``suite_hash`` names it in reports. The instructions are generic (no
wording keyed to Duet's own prompts) and each kind has several phrasings.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import asdict, dataclass

from bench import stdlib_text as st

SEED = 13
PER_CATEGORY = 6
# Bounds every user turn keeps (the token bound is checked with real tokenizers in the tests).
MAX_PROMPT_CHARS, MAX_PROMPT_TOKENS = 4000, 1500
CATEGORIES = ("multi_turn", "translation", "summarization", "qa", "math", "rag", "code_edit", "code_new")


@dataclass(frozen=True)
class SuitePrompt:
    id: str
    category: str
    turns: tuple[str, ...]  # user messages; a multi-turn prompt has two, the second timed
    source: str  # where the text came from: "module:def" or "topics:key" or "rng"
    kind: str = ""  # the edit kind for code editing

    @property
    def text(self) -> str:
        return self.turns[0]


# -- code editing -----------------------------------------------------------------------------
# (module, first definition): small self-contained pure-Python code present in CPython 3.11+.
# More than twelve, so that a version that lost one still has twelve.
EDIT_SOURCES = (
    ("textwrap", "dedent"), ("colorsys", "rgb_to_hls"), ("fnmatch", "fnmatch"),
    ("bisect", "insort_right"), ("heapq", "_siftdown"), ("calendar", "isleap"),
    ("difflib", "get_close_matches"), ("glob", "glob"), ("statistics", "median"),
    ("ipaddress", "ip_address"), ("html", "escape"), ("quopri", "decode"),
    ("copy", "deepcopy"), ("csv", "DictReader"), ("getopt", "do_longs"),
)
N_EDIT = 12

EDITS: dict[str, tuple[str, ...]] = {
    "type_hints": (
        "Add type hints to every function signature in this code. Return the complete code.",
        "Annotate all parameters and return values with Python type hints, leaving the logic as it "
        "is, and output the full code.",
    ),
    "docstrings": (
        "Rewrite the docstrings in Google style (Args:, Returns:, Raises:), adding one wherever a "
        "function has none. Give back the whole code.",
        "Convert every docstring to NumPy style with Parameters and Returns sections. Output the "
        "complete modified code.",
        "Document each function with a reStructuredText docstring (:param name: and :returns:). "
        "Reply with the full code.",
    ),
    "rename": (
        "Rename the parameter `{param}` to `{param_new}` everywhere in the code and return the "
        "complete code.",
        "Please use the name `{param_new}` instead of `{param}`, updating every use, and print the "
        "full updated source.",
    ),
    "comments": (
        "Add a short comment above each block explaining what it does. Return all of the code.",
        "Insert inline comments on the lines that are not obvious, without changing the code "
        "itself, and show the complete result.",
    ),
    "dataclass": (
        "Refactor this code so that the values it passes around together are grouped in a "
        "@dataclass. Show the complete refactored code.",
        "Introduce a frozen dataclass holding the options these functions take and use it "
        "throughout. Return the full code.",
    ),
    "fstrings": (
        "Replace %-formatting, str.format calls and string concatenation with f-strings wherever "
        "possible. Return the whole file.",
        "Modernize the string handling to use f-strings; output the full code.",
    ),
    "errors": (
        "Add input validation: raise TypeError or ValueError with a clear message when an argument "
        "is invalid. Return the full code.",
        "Make this code more robust: check the arguments up front and raise descriptive exceptions. "
        "Give back the entire modified code.",
    ),
    "bug_fix": (
        "This code contains one bug that changes its behaviour. Find it, fix it, and return the "
        "corrected code in full.",
        "One operator in the code below is wrong. Fix it and print the whole fixed version.",
    ),
    "logging": (
        "Add logging: a module-level logger and a debug message when each function starts, with its "
        "arguments. Return the complete code.",
        "Instrument the code with the logging module (logger = logging.getLogger(__name__)) at the "
        "important steps. Output everything.",
    ),
    "split": (
        "Split the longest function into smaller helper functions without changing its behaviour; "
        "return the complete code.",
        "Reduce nesting with early returns (guard clauses) where it helps, keeping the behaviour. "
        "Reply with the full code.",
    ),
}


def _code_block(code: str) -> str:
    return f"```python\n{code.rstrip()}\n```"


def _wrap(rng: random.Random, instruction: str, body: str) -> str:
    """Instruction before or after the material, as people write both."""
    return f"{instruction}\n\n{body}" if rng.random() < 0.5 else f"{body}\n\n{instruction}"


def _code_edit(rng: random.Random) -> list[SuitePrompt]:
    excerpts = [e for e in (st.excerpt(m, d) for m, d in EDIT_SOURCES) if e is not None][:N_EDIT]
    kinds = list(EDITS)
    rng.shuffle(kinds)
    out = []
    for i, ex in enumerate(excerpts):
        kind = kinds[i % len(kinds)]
        code = ex.code
        if kind == "bug_fix":
            code = st.inject_bug(code, rng)
        params = st.parameters(code) or ["value"]
        instruction = rng.choice(EDITS[kind]).format(param=params[0], param_new=f"{params[0]}_in")
        out.append(SuitePrompt(f"code_edit-{i:02d}-{ex.module}-{kind}", "code_edit",
                               (_wrap(rng, instruction, _code_block(code)),), f"{ex.module}:{ex.names[0]}",
                               kind))
    return out


# -- code from scratch ------------------------------------------------------------------------
NEW_SOURCES = (
    ("textwrap", "shorten"), ("string", "capwords"), ("statistics", "multimode"), ("heapq", "merge"),
    ("secrets", "token_urlsafe"), ("statistics", "geometric_mean"), ("shutil", "ignore_patterns"),
    ("getopt", "gnu_getopt"),
)
NEW_ASKS = (
    "Write a Python function `{sig}` from scratch, without importing `{module}`. It should behave "
    "as this description says:\n\n{doc}",
    "Implement the following function in plain Python (no `{module}`).\n\n{sig}:\n\"\"\"{doc}\"\"\"",
    "I need `{sig}`. Specification:\n\n{doc}\n\nWrite the implementation, then a few example calls.",
)


def _code_new(rng: random.Random) -> list[SuitePrompt]:
    out: list[SuitePrompt] = []
    for module, name in NEW_SOURCES:
        spec = st.function_spec(module, name)
        if spec is None or len(out) == PER_CATEGORY:
            continue
        sig, doc = spec
        text = rng.choice(NEW_ASKS).format(sig=sig, module=module, doc=doc)
        out.append(SuitePrompt(f"code_new-{len(out):02d}-{name}", "code_new", (text,), f"{module}:{name}"))
    return out


# -- passages ---------------------------------------------------------------------------------
LANGUAGES = ("French", "German", "Spanish", "Italian", "Portuguese", "Chinese")
TRANSLATE = (
    "Translate the following text into {lang}:\n\n{text}",
    "Please translate this passage to {lang}, keeping the code fragments unchanged.\n\n{text}",
    "{text}\n\nTranslate the text above into {lang}.",
)
SUMMARIZE = (
    "Summarize the following documentation in three bullet points.\n\n{text}",
    "{text}\n\nWrite a one-paragraph summary of the text above.",
    "Give a short summary (at most five sentences) of this section of the Python reference:\n\n{text}",
)
ASK = (
    "In Python, what is meant by {title}? Answer concisely.",
    "Explain {title} in Python to someone who knows another programming language.",
    "What should a Python programmer know about {title}? Give a short answer with one example.",
)
RAG = (
    "Answer the question using only the documents below, and quote the sentence that supports "
    "your answer.\n\n{docs}\n\nQuestion: {question}",
    "{docs}\n\nBased on these documents, {question_lower} Cite the document you used.",
)
RAG_QUESTIONS = (
    "What does the documentation say about {title}?",
    "According to the documents, what are the rules for {title}?",
)


def _title(p: st.Passage) -> str:
    """The topic's title for use inside a sentence: 'The "with" statement' -> 'the with statement'
    (capitalized words lowered; "Python" and names such as "NotImplemented" kept)."""
    words = p.title.replace('"', "").split()
    return " ".join(w.lower() if w[:1].isupper() and w[1:].islower() and w != "Python" else w
                    for w in words)


def _translation(rng: random.Random) -> list[SuitePrompt]:
    keys = rng.sample(st.topic_keys(500, 1400), PER_CATEGORY)
    out = []
    for i, key in enumerate(keys):
        p = st.passage(key, 1200)
        text = rng.choice(TRANSLATE).format(lang=LANGUAGES[i % len(LANGUAGES)], text=p.text)
        out.append(SuitePrompt(f"translation-{i:02d}-{key}", "translation", (text,), f"topics:{key}"))
    return out


def _summarization(rng: random.Random) -> list[SuitePrompt]:
    keys = rng.sample(st.topic_keys(2500), PER_CATEGORY)
    out = []
    for i, key in enumerate(keys):
        text = rng.choice(SUMMARIZE).format(text=st.passage(key, 3400).text)
        out.append(SuitePrompt(f"summarization-{i:02d}-{key}", "summarization", (text,), f"topics:{key}"))
    return out


def _qa(rng: random.Random) -> list[SuitePrompt]:
    keys = rng.sample(st.topic_keys(0), PER_CATEGORY)
    out = []
    for i, key in enumerate(keys):
        text = rng.choice(ASK).format(title=_title(st.passage(key, 200)))
        out.append(SuitePrompt(f"qa-{i:02d}-{key}", "qa", (text,), f"topics:{key}"))
    return out


def _rag(rng: random.Random) -> list[SuitePrompt]:
    pool = st.topic_keys(600)
    out = []
    for i in range(PER_CATEGORY):
        keys = rng.sample(pool, 3)
        docs = [st.passage(k, 1100) for k in keys]
        gold = rng.choice(docs)
        question = rng.choice(RAG_QUESTIONS).format(title=_title(gold))
        block = "\n\n".join(f"Document {j + 1}: {_title(d)}\n{d.text}" for j, d in enumerate(docs))
        text = rng.choice(RAG).format(docs=block, question=question,
                                      question_lower=question[0].lower() + question[1:])
        out.append(SuitePrompt(f"rag-{i:02d}-{gold.key}", "rag", (text,), "topics:" + ",".join(keys)))
    return out


# -- math: word problems with numbers from the generator --------------------------------------
MATH_ASKS = ("Solve step by step and give the final answer on the last line.",
             "Show your reasoning, then state the answer.",
             "Work it out carefully and explain each step.")


def _problems(rng: random.Random) -> list[str]:
    r = rng.randint
    a, b, n, m = r(2, 9), r(2, 9), r(2, 6), r(2, 8)
    heads_cows, heads_hens = r(3, 20), r(3, 30)
    return [
        f"A shop sells notebooks at ${a} each and pens at ${b} each. A customer buys {n} notebooks and "
        f"{m} pens and pays with a ${(a * n + b * m) // 10 * 10 + 10} note. How much change is due?",
        f"A train travels {r(60, 200)} km at {r(40, 90)} km/h and then {r(60, 200)} km at "
        f"{r(60, 120)} km/h. What is its average speed over the whole journey?",
        f"A jacket costs ${r(40, 200)}. It is discounted by {r(10, 40)}% and then a {r(5, 20)}% sales "
        f"tax is added to the discounted price. What is the final price?",
        f"One pipe fills a tank in {r(2, 9)} hours and a second pipe fills it in {r(3, 12)} hours. How "
        f"long do the two pipes take to fill the tank together?",
        f"A farm has cows and hens: {heads_cows + heads_hens} heads and {4 * heads_cows + 2 * heads_hens} "
        f"legs in all. How many cows are there?",
        f"${r(1, 20) * 500} is invested at {r(2, 8)}% interest compounded once a year. How much is it "
        f"worth after {r(2, 10)} years?",
        f"A recipe for {r(2, 6)} people needs {r(150, 600)} g of flour and {r(2, 5)} eggs. How much of "
        f"each is needed for {r(7, 15)} people?",
    ]


def _math(rng: random.Random) -> list[SuitePrompt]:
    problems = _problems(rng)[:PER_CATEGORY]
    return [SuitePrompt(f"math-{i:02d}", "math", (f"{p} {rng.choice(MATH_ASKS)}",), "rng")
            for i, p in enumerate(problems)]


# -- multi-turn: a follow-up that leans on the first answer -----------------------------------
def _multi_turn(rng: random.Random) -> list[SuitePrompt]:
    code = st.excerpt("textwrap", "indent") or st.excerpt("colorsys", "rgb_to_hsv")
    summary_key = rng.choice(st.topic_keys(2500))
    trans_key = rng.choice(st.topic_keys(500, 1400))
    ask_key = rng.choice(st.topic_keys(0))
    spec = st.function_spec("string", "capwords")
    if code is None or spec is None:
        raise RuntimeError("this interpreter's standard library has no source for the suite's excerpts")
    pairs = [
        (f"Here is some code from Python's {code.module} module:\n\n{_code_block(code.code)}\n\n"
         "Explain what it does in a few sentences.",
         "Now rewrite it with type hints and docstrings, and return the complete code.",
         f"{code.module}:{code.names[0]}"),
        (rng.choice(SUMMARIZE).format(text=st.passage(summary_key, 3000).text),
         "Rewrite your summary for a beginner, then list three key terms from the passage.",
         f"topics:{summary_key}"),
        (_math(rng)[0].text, "Now suppose every number in the problem is doubled. Solve it again.", "rng"),
        (TRANSLATE[0].format(lang="French", text=st.passage(trans_key, 1000).text),
         "Translate your French text back into English.", f"topics:{trans_key}"),
        (ASK[1].format(title=_title(st.passage(ask_key, 200))),
         "Give a short code example that illustrates your answer and explain each line.",
         f"topics:{ask_key}"),
        (NEW_ASKS[0].format(sig=spec[0], module="string", doc=spec[1]),
         "Add unit tests for your function using unittest, and show the complete file.",
         "string:capwords"),
    ]
    return [SuitePrompt(f"multi_turn-{i:02d}", "multi_turn", (t1, t2), src)
            for i, (t1, t2, src) in enumerate(pairs)]


BUILDERS = {"multi_turn": _multi_turn, "translation": _translation, "summarization": _summarization,
            "qa": _qa, "math": _math, "rag": _rag, "code_edit": _code_edit, "code_new": _code_new}


def build_suite(seed: int = SEED) -> tuple[SuitePrompt, ...]:
    """Every prompt of every category, in CATEGORIES order. Each category has its own generator,
    so selecting categories never changes the prompts of the others."""
    out: list[SuitePrompt] = []
    for cat in CATEGORIES:
        out += BUILDERS[cat](random.Random(f"{seed}-{cat}"))
    return tuple(out)


def select(prompts: tuple[SuitePrompt, ...], categories: tuple[str, ...] = (),
           per_category: int = 0) -> list[SuitePrompt]:
    """The prompts of ``categories`` (all when empty), at most ``per_category`` of each (0: all)."""
    unknown = set(categories) - set(CATEGORIES)
    if unknown:
        raise ValueError(f"unknown categories: {', '.join(sorted(unknown))} "
                         f"(choose from {', '.join(CATEGORIES)})")
    taken: dict[str, int] = {}
    out = []
    for p in prompts:
        if categories and p.category not in categories:
            continue
        if per_category and taken.get(p.category, 0) >= per_category:
            continue
        taken[p.category] = taken.get(p.category, 0) + 1
        out.append(p)
    return out


def suite_hash(prompts: tuple[SuitePrompt, ...] | list[SuitePrompt]) -> str:
    """SHA-256 (first 16 hex digits) of the prompts' JSON: two runs with one hash saw one suite."""
    blob = json.dumps([asdict(p) for p in prompts], sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]
