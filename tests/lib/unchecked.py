"""unchecked.py FILE...: the `a && b` lines in the bodies of bats tests
that bats does not check. Under errexit a failing command left of && is
ignored, so `[ x ] && [ y ]` checks nothing of x unless it is the test's
last line. Allowed: a list with || (its failure handled), the condition
of an if or a loop, [[ a && b ]] (one test), and a guard whose right end
is a jump or a variable set ([ -n "$x" ] && y=1). Prints FILE:LINE: and
the list for each; exit 1 when there is one."""
import re
import sys

def statements(body, first):
    """(line, statement) of a test's body: quoted text, $(...), comments
    and heredocs left out; continued lines joined; split at ';'"""
    out, cur, start, n, i = [], [], first, first, 0
    stack = [["code", 0]]		# contexts: code (open parens), ' or "
    heredoc = None
    while i < len(body):
        ch, top = body[i], stack[-1]
        n += ch == "\n"
        if top[0] == "'":
            if ch == "'":
                stack.pop()
        elif top[0] == '"':
            if ch == "\\":
                i += 1
                n += body[i:i + 1] == "\n"
            elif ch == '"':
                stack.pop()
            elif body.startswith("$(", i):
                stack.append(["code", 0])
                i += 1
        elif ch == "\\":
            i += 1
            n += body[i:i + 1] == "\n"
        elif ch in "'\"":
            stack.append([ch, 0])
        elif body.startswith("$(", i):
            stack.append(["code", 0])
            i += 1
        elif ch == "#" and (i == 0 or body[i - 1] in " \t\n;"):
            while i + 1 < len(body) and body[i + 1] != "\n":
                i += 1
        elif len(stack) > 1:
            if ch == "(":
                top[1] += 1
            elif ch == ")":
                top[1] -= 1
                if top[1] < 0:
                    stack.pop()
        elif body.startswith("<<", i) and re.match(r"<<-?\s*['\"]?\w", body[i:]):
            m = re.match(r"<<-?\s*['\"]?(\w+)['\"]?", body[i:])
            heredoc = m.group(1)
            i += m.end() - 1
        elif ch in ";\n":
            s = "".join(cur).strip()
            if not (ch == "\n" and s.endswith(("&&", "||", "|"))):
                if s:
                    out.append((start, s))
                cur, start = [], n + (ch == ";")
            if ch == "\n" and heredoc is not None:
                end = re.compile(r"^[ \t]*" + heredoc + r"$", re.M).search(body, i + 1)
                stop = end.end() if end else len(body)
                n += body[i + 1:stop].count("\n")
                i, heredoc, start = stop - 1, None, n + 1
        else:
            cur.append(ch)
        i += 1
    s = "".join(cur).strip()
    if s:
        out.append((start, s))
    return out

def unchecked(path):
    lines = open(path).read().split("\n")
    found, i = [], 0
    while i < len(lines):
        if not re.match(r"@test\b", lines[i]):
            i += 1
            continue
        j = i + 1
        while j < len(lines) and lines[j] != "}":
            j += 1
        stmts = statements("\n".join(lines[i + 1:j]), i + 2)
        i = j
        for k, (n, s) in enumerate(stmts):
            s = re.sub(r"^((then|do|else|\{|\()\s+)+", "", s)
            if ("&&" not in s or "||" in s or k == len(stmts) - 1 or
                re.match(r"(if|elif|while|until)\b", s) or
                re.fullmatch(r"\[\[.*\]\]", s) and s.count("]]") == 1):
                continue
            tail = s.rsplit("&&", 1)[1].strip()
            # a guard: a jump, or a variable set, only when a holds
            if re.match(r"(continue|break|return|exit)\b|\w+\+?=", tail):
                continue
            found.append("%s:%d: %s" % (path, n, " ".join(s.split())))
    return found

bad = [f for path in sys.argv[1:] for f in unchecked(path)]
for f in bad:
    print(f)
sys.exit(1 if bad else 0)
