"""A small regex syntax highlighter for code blocks: keywords, strings, comments, numbers.

``highlight(code, lang)`` returns non-overlapping ``(start, end, kind)`` spans in order. One scan
with one alternation per language family, comments and strings first, so a keyword inside a
string or a comment is not coloured. Unknown languages get a generic rule set. Pure Python.
"""

from __future__ import annotations

import re
from functools import lru_cache

KINDS = ("keyword", "string", "comment", "number")

_PY_KW = """False None True and as assert async await break class continue def del elif else
except finally for from global if import in is lambda nonlocal not or pass raise return try
while with yield match case self print len range"""
_C_KW = """auto break case char const continue default do double else enum extern float for goto
if inline int long register return short signed sizeof static struct switch typedef union
unsigned void volatile while bool true false nullptr NULL include define class public private
protected virtual template typename namespace using new delete this throw try catch operator
std string vector"""
_JS_KW = """break case catch class const continue debugger default delete do else export extends
finally for function if import in instanceof let new return super switch this throw try typeof
var void while with yield async await of null undefined true false interface type enum
implements readonly string number boolean any"""
_RUST_KW = """as async await break const continue crate dyn else enum extern false fn for if impl
in let loop match mod move mut pub ref return self Self static struct super trait true type
unsafe use where while Some None Ok Err Vec String Option Result"""
_GO_KW = """break case chan const continue default defer else fallthrough for func go goto if
import interface map package range return select struct switch type var nil true false string
int error"""
_JAVA_KW = """abstract assert boolean break byte case catch char class const continue default do
double else enum extends final finally float for if implements import instanceof int interface
long native new package private protected public return short static super switch synchronized
this throw throws try void volatile while true false null String var val fun override"""
_SH_KW = """if then else elif fi case esac for while until do done in function return exit
export local echo cd set unset source read shift"""
_SQL_KW = """select from where insert into values update set delete create table drop alter
index join left right inner outer on group by order having limit and or not null as distinct
primary key foreign references union all"""
_GENERIC_KW = " ".join(sorted(set((_PY_KW + _C_KW + _JS_KW).split())))

_DQ = r'"(?:[^"\\\n]|\\.)*"?'
_SQ = r"'(?:[^'\\\n]|\\.)*'?"
_NUM = r"\b(?:0[xX][0-9a-fA-F_]+|\d[\d_]*(?:\.\d[\d_]*)?(?:[eE][+-]?\d+)?)\b"

# family -> (comment patterns, string patterns, keywords, case-insensitive keywords)
_FAMILIES: dict[str, tuple[str, str, str, bool]] = {
    "python": (r"\#[^\n]*", r'(?:[rRbBuUfF]{0,2})(?:"""[\s\S]*?(?:"""|$)|\'\'\'[\s\S]*?(?:\'\'\'|$)|'
               + _DQ + "|" + _SQ + ")", _PY_KW, False),
    "c": (r"//[^\n]*|/\*[\s\S]*?(?:\*/|$)", _DQ + "|" + _SQ, _C_KW, False),
    "js": (r"//[^\n]*|/\*[\s\S]*?(?:\*/|$)", _DQ + "|" + _SQ + r"|`(?:[^`\\]|\\.)*`?", _JS_KW, False),
    "rust": (r"//[^\n]*|/\*[\s\S]*?(?:\*/|$)", _DQ, _RUST_KW, False),
    "go": (r"//[^\n]*|/\*[\s\S]*?(?:\*/|$)", _DQ + r"|`[^`]*`?|" + _SQ, _GO_KW, False),
    "java": (r"//[^\n]*|/\*[\s\S]*?(?:\*/|$)", _DQ + "|" + _SQ, _JAVA_KW, False),
    "sh": (r"(?<![\w$])\#[^\n]*", _DQ + "|" + r"'[^']*'?", _SH_KW, False),
    "sql": (r"--[^\n]*|/\*[\s\S]*?(?:\*/|$)", _SQ + "|" + _DQ, _SQL_KW, True),
    "generic": (r"//[^\n]*|/\*[\s\S]*?(?:\*/|$)|(?<![\w$])\#[^\n]*", _DQ + "|" + _SQ,
                _GENERIC_KW, False),
}
_ALIASES = {
    "py": "python", "python3": "python", "python": "python",
    "c": "c", "h": "c", "cpp": "c", "c++": "c", "cc": "c", "hpp": "c", "cxx": "c", "cs": "java",
    "csharp": "java", "js": "js", "javascript": "js", "ts": "js", "typescript": "js", "jsx": "js",
    "tsx": "js", "json": "js", "rust": "rust", "rs": "rust", "go": "go", "golang": "go",
    "java": "java", "kotlin": "java", "kt": "java", "scala": "java", "swift": "java",
    "sh": "sh", "bash": "sh", "shell": "sh", "zsh": "sh", "console": "sh", "sql": "sql",
}


def family(lang: str) -> str:
    return _ALIASES.get(lang.strip().lower(), "generic")


@lru_cache(maxsize=16)
def _pattern(fam: str) -> re.Pattern[str]:
    comment, string, keywords, nocase = _FAMILIES[fam]
    words = "|".join(sorted(set(keywords.split()), key=len, reverse=True))
    kw = rf"(?i:\b(?:{words})\b)" if nocase else rf"\b(?:{words})\b"
    return re.compile(rf"(?P<comment>{comment})|(?P<string>{string})|(?P<keyword>{kw})"
                      rf"|(?P<number>{_NUM})")


def highlight(code: str, lang: str = "") -> list[tuple[int, int, str]]:
    """Spans ``(start, end, kind)`` of ``code``, kind in KINDS, sorted and non-overlapping."""
    return [(m.start(), m.end(), str(m.lastgroup)) for m in _pattern(family(lang)).finditer(code)
            if m.end() > m.start()]
