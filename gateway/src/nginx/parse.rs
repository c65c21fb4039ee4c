//! nginx.conf read as Nginx reads it (`ngx_conf_file.c`): words separated by blanks, `;` ending a
//! directive, `{ }` a block, `#` a comment to the end of the line at a word's start, `"…"` and
//! `'…'` quoted with `\` escapes, `${name}` a variable whose braces may not be split; `include`
//! files (a `*` glob in the last part, sorted) read in place, relative to the main file's
//! folder as Nginx's conf prefix is. Every directive keeps its file, line and column.

use std::path::{Path, PathBuf};
use std::rc::Rc;

/// One directive: its name, arguments, its block if it has one, and where it was written.
#[derive(Debug, Clone, PartialEq)]
pub struct Directive {
    /// Its name (`server`, `location`, `proxy_pass`...).
    pub name: String,
    /// Its arguments, unquoted.
    pub args: Vec<String>,
    /// Its block (`server { … }`), when it has one.
    pub block: Option<Vec<Directive>>,
    /// Where it was written.
    pub at: Place,
}

/// A file, line and column (1-based).
#[derive(Debug, Clone, PartialEq)]
pub struct Place {
    /// The file.
    pub file: Rc<PathBuf>,
    /// Its line.
    pub line: usize,
    /// Its column.
    pub col: usize,
}

impl std::fmt::Display for Place {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}:{}", self.file.display(), self.line, self.col)
    }
}

/// A token: a word (quoted or not) or one of `;`, `{`, `}`.
#[derive(Debug, Clone, PartialEq)]
enum Token {
    Word(String),
    Semi,
    Open,
    Close,
}

/// How deep `include`s may nest (a file including itself is refused at this depth).
const MAX_INCLUDE_DEPTH: usize = 16;

/// Reads `path` and every file it includes.
pub fn read(path: &Path) -> Result<Vec<Directive>, String> {
    let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
    read_file(path, &base, 0)
}

fn read_file(path: &Path, base: &Path, depth: usize) -> Result<Vec<Directive>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let file = Rc::new(path.to_path_buf());
    let tokens = lex(&text, &file)?;
    let mut at = 0;
    let list = block(&tokens, &mut at, &file, false)?;
    expand(list, base, depth)
}

/// `include` directives replaced by what their files hold, at every level.
fn expand(list: Vec<Directive>, base: &Path, depth: usize) -> Result<Vec<Directive>, String> {
    let mut out = Vec::new();
    for mut d in list {
        if d.name == "include" && d.block.is_none() {
            if d.args.len() != 1 {
                return Err(format!("{}: include takes one file (or pattern)", d.at));
            }
            if depth >= MAX_INCLUDE_DEPTH {
                return Err(format!("{}: includes nest deeper than {MAX_INCLUDE_DEPTH} (a loop?)", d.at));
            }
            let files =
                glob(&base.join(&d.args[0])).map_err(|e| format!("{}: include {}: {e}", d.at, d.args[0]))?;
            for f in files {
                out.extend(read_file(&f, base, depth + 1)?);
            }
            continue;
        }
        if let Some(inner) = d.block.take() {
            d.block = Some(expand(inner, base, depth)?);
        }
        out.push(d);
    }
    Ok(out)
}

/// The files of `pattern`: itself, or with a `*` in its last part, the matching files sorted
/// (none is not an error, as Nginx's).
fn glob(pattern: &Path) -> Result<Vec<PathBuf>, String> {
    let name = pattern.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
    if !name.contains('*') {
        return pattern
            .is_file()
            .then(|| vec![pattern.to_path_buf()])
            .ok_or_else(|| "no such file".to_string());
    }
    let dir = pattern.parent().unwrap_or(Path::new("."));
    let (head, tail) = name.split_once('*').unwrap_or((&name, ""));
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            let n = p.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
            p.is_file() && n.len() >= head.len() + tail.len() && n.starts_with(head) && n.ends_with(tail)
        })
        .collect();
    found.sort();
    Ok(found)
}

/// The directives up to the end of the tokens (`inner`: up to a `}`).
fn block(
    tokens: &[(Token, usize, usize)],
    at: &mut usize,
    file: &Rc<PathBuf>,
    inner: bool,
) -> Result<Vec<Directive>, String> {
    let mut out = Vec::new();
    let place = |line, col| Place { file: Rc::clone(file), line, col };
    loop {
        let Some((tok, line, col)) = tokens.get(*at) else {
            return match inner {
                true => Err(format!("{}: unexpected end of file, expecting \"}}\"", file.display())),
                false => Ok(out),
            };
        };
        *at += 1;
        let name = match tok {
            Token::Close if inner => return Ok(out),
            Token::Word(w) => w.clone(),
            other => return Err(format!("{}: unexpected {}", place(*line, *col), shown(other))),
        };
        let mut args = Vec::new();
        loop {
            match tokens.get(*at) {
                Some((Token::Word(w), ..)) => args.push(w.clone()),
                Some((Token::Semi, ..)) => {
                    *at += 1;
                    out.push(Directive { name, args, block: None, at: place(*line, *col) });
                    break;
                }
                Some((Token::Open, ..)) => {
                    *at += 1;
                    let inner = block(tokens, at, file, true)?;
                    out.push(Directive { name, args, block: Some(inner), at: place(*line, *col) });
                    break;
                }
                Some((Token::Close, l, c)) => {
                    return Err(format!(
                        "{}: unexpected \"}}\" (is a \";\" missing after {name}?)",
                        place(*l, *c)
                    ))
                }
                None => {
                    return Err(format!(
                        "{}: unexpected end of file, expecting \";\" or \"}}\"",
                        place(*line, *col)
                    ))
                }
            }
            *at += 1;
        }
    }
}

fn shown(t: &Token) -> &'static str {
    match t {
        Token::Semi => "\";\"",
        Token::Open => "\"{\"",
        Token::Close => "\"}\"",
        Token::Word(_) => "word",
    }
}

/// The tokens of `text`, each with its line and column.
fn lex(text: &str, file: &Rc<PathBuf>) -> Result<Vec<(Token, usize, usize)>, String> {
    let mut cur = Cursor { chars: text.chars().collect(), i: 0, line: 1, col: 1 };
    let mut out = Vec::new();
    let err = |line, col, what: &str| format!("{}:{line}:{col}: {what}", file.display());
    while let Some(c) = cur.peek() {
        let (l0, c0) = (cur.line, cur.col);
        match c {
            c if c.is_whitespace() => cur.step(),
            '#' => {
                while cur.peek().is_some_and(|ch| ch != '\n') {
                    cur.step();
                }
            }
            ';' | '{' | '}' => {
                out.push((
                    match c {
                        ';' => Token::Semi,
                        '{' => Token::Open,
                        _ => Token::Close,
                    },
                    l0,
                    c0,
                ));
                cur.step();
            }
            '"' | '\'' => {
                let word = cur.quoted(c).map_err(|(line, col, what)| err(line, col, &what))?;
                out.push((Token::Word(word), l0, c0));
            }
            _ => {
                let word = cur.bare().ok_or_else(|| err(l0, c0, "unterminated ${ in a word"))?;
                out.push((Token::Word(word), l0, c0));
            }
        }
    }
    Ok(out)
}

/// Where the lexer is in the text: the character's index, line and column.
struct Cursor {
    chars: Vec<char>,
    i: usize,
    line: usize,
    col: usize,
}

impl Cursor {
    /// The character here, if any is left.
    fn peek(&self) -> Option<char> {
        self.chars.get(self.i).copied()
    }

    /// Moves past the character here, counting lines and columns.
    fn step(&mut self) {
        if self.chars[self.i] == '\n' {
            self.line += 1;
            self.col = 1;
        } else {
            self.col += 1;
        }
        self.i += 1;
    }

    /// A word quoted by `quote` (here), unescaped; an error (its line, column and what) when it
    /// is not closed, or is followed by more than a separator.
    fn quoted(&mut self, quote: char) -> Result<String, (usize, usize, String)> {
        let (l0, c0) = (self.line, self.col);
        self.step();
        let mut word = String::new();
        loop {
            let Some(ch) = self.peek() else {
                return Err((l0, c0, "unterminated quoted string".to_string()));
            };
            self.step();
            match ch {
                '\\' if self.i < self.chars.len() => {
                    unescape(&mut word, self.chars[self.i]);
                    self.step();
                }
                ch if ch == quote => break,
                ch => word.push(ch),
            }
        }
        if self.peek().is_some_and(|n| !n.is_whitespace() && !matches!(n, ';' | '{' | ')')) {
            let what = format!("unexpected \"{}\" after a quoted string", self.chars[self.i]);
            return Err((self.line, self.col, what));
        }
        Ok(word)
    }

    /// A word that is not quoted, unescaped, up to a space or a separator (none inside `${...}`);
    /// `None` when a `${` is not closed.
    fn bare(&mut self) -> Option<String> {
        let mut word = String::new();
        let mut braces = false;
        while let Some(ch) = self.peek() {
            if !braces && (ch.is_whitespace() || matches!(ch, ';' | '{' | '}')) {
                break;
            }
            self.step();
            match ch {
                '\\' if self.i < self.chars.len() => {
                    unescape(&mut word, self.chars[self.i]);
                    self.step();
                }
                '$' if self.peek() == Some('{') => {
                    braces = true;
                    word.push(ch);
                }
                '}' if braces => {
                    braces = false;
                    word.push(ch);
                }
                ch => word.push(ch),
            }
        }
        (!braces).then_some(word)
    }
}

/// A word's escape, quoted or not, as Nginx's: `\"`, `\'`, `\\` the character, `\t`, `\r`, `\n`
/// a tab, a return, a newline; any other is kept with its backslash (a regex keeps its `\.`).
fn unescape(word: &mut String, ch: char) {
    match ch {
        '"' | '\'' | '\\' => word.push(ch),
        't' => word.push('\t'),
        'r' => word.push('\r'),
        'n' => word.push('\n'),
        other => {
            word.push('\\');
            word.push(other);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Vec<Directive>, String> {
        let file = Rc::new(PathBuf::from("t.conf"));
        let tokens = lex(text, &file)?;
        block(&tokens, &mut 0, &file, false)
    }

    fn names(list: &[Directive]) -> Vec<String> {
        list.iter().map(|d| format!("{}{:?}", d.name, d.args)).collect()
    }

    #[test]
    fn directives_blocks_quotes_comments_and_places() {
        let list = parse(
            "worker_processes 2; # a comment\nhttp {\n  server {\n    server_name  \"a b\" 'c;d' e\\ f;\n    \
             location ~* \\.(png|jpg)$ { return 200 \"ok\\n\"; }\n  }\n}\n",
        )
        .unwrap();
        assert_eq!(names(&list), ["worker_processes[\"2\"]", "http[]"]);
        let server = &list[1].block.as_ref().unwrap()[0];
        let inner = server.block.as_ref().unwrap();
        assert_eq!(inner[0].args, ["a b", "c;d", "e\\ f"]);
        assert_eq!((inner[0].at.line, inner[0].at.col), (4, 5));
        assert_eq!(inner[1].args, ["~*", "\\.(png|jpg)$"]);
        assert_eq!(inner[1].block.as_ref().unwrap()[0].args, ["200", "ok\n"]);
        assert_eq!(inner[1].at.to_string(), "t.conf:5:5");
    }

    #[test]
    fn variables_in_braces_and_if_conditions_stay_words() {
        let list =
            parse("if ($http_x = \"1\") { set $a \"${host}x\"; }\nreturn 301 https://${host}$request_uri;")
                .unwrap();
        assert_eq!(list[0].args, ["($http_x", "=", "1", ")"]);
        assert_eq!(list[0].block.as_ref().unwrap()[0].args, ["$a", "${host}x"]);
        assert_eq!(list[1].args, ["301", "https://${host}$request_uri"]);
    }

    #[test]
    fn broken_files_are_refused_with_their_place() {
        let e = |t: &str| parse(t).unwrap_err();
        assert_eq!(
            e("http {\n  listen 80\n}\n"),
            "t.conf:3:1: unexpected \"}\" (is a \";\" missing after listen?)"
        );
        assert_eq!(e("a \"b;\n"), "t.conf:1:3: unterminated quoted string");
        assert_eq!(e("http { server {"), "t.conf: unexpected end of file, expecting \"}\"");
        assert_eq!(e("}"), "t.conf:1:1: unexpected \"}\"");
        assert_eq!(e("listen 80"), "t.conf:1:1: unexpected end of file, expecting \";\" or \"}\"");
        assert_eq!(e("a \"b\"c;"), "t.conf:1:6: unexpected \"c\" after a quoted string");
        assert_eq!(e("a ${b;"), "t.conf:1:3: unterminated ${ in a word");
    }

    #[test]
    fn includes_are_read_in_place_sorted_relative_to_the_main_file() {
        let dir = std::env::temp_dir().join(format!("nginx-include-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("conf.d")).unwrap();
        std::fs::write(dir.join("nginx.conf"), "http { include conf.d/*.conf; include mime.types; }")
            .unwrap();
        std::fs::write(dir.join("mime.types"), "types { text/html html; }").unwrap();
        std::fs::write(dir.join("conf.d/b.conf"), "server { listen 82; }").unwrap();
        std::fs::write(dir.join("conf.d/a.conf"), "server { listen 81; include mime.types; }").unwrap();
        std::fs::write(dir.join("conf.d/skip.txt"), "oops").unwrap();
        let list = read(&dir.join("nginx.conf")).unwrap();
        let http = list[0].block.as_ref().unwrap();
        assert_eq!(names(http), ["server[]", "server[]", "types[]"]);
        assert_eq!(http[0].block.as_ref().unwrap()[0].args, ["81"]);
        assert!(http[1].at.file.ends_with("conf.d/b.conf"));
        // A file including itself is stopped.
        std::fs::write(dir.join("loop.conf"), "include loop.conf;").unwrap();
        assert!(read(&dir.join("loop.conf")).unwrap_err().contains("nest deeper than 16"));
        std::fs::write(dir.join("missing.conf"), "include nope.conf;").unwrap();
        assert!(read(&dir.join("missing.conf"))
            .unwrap_err()
            .contains("missing.conf:1:1: include nope.conf: no such file"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
