//! `--where` text to a `Node` tree. sqlparser (GenericDialect) reads the SQL; only what a row
//! filter evaluates is kept, each part with its place in the text so that any later error can
//! point at it. Anything else SQL allows (functions, subqueries, casts) is refused here, with a
//! caret, rather than failing later in a less clear way.
//!
//! Reads and writes nothing.

use super::{Problem, Span};
use sqlparser::ast::{BinaryOperator, Expr, InTarget, Spanned, UnaryOperator, Value};
use sqlparser::dialect::GenericDialect;
use sqlparser::parser::{Parser, ParserError};
use sqlparser::tokenizer::{Location, Token, Tokenizer};

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Lit {
    Int(i64),
    Float(f64),
    Text(String),
    Bool(bool),
    Null,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum CmpOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum ArithOp {
    Add,
    Sub,
    Mul,
    Div,
    Rem,
}

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Kind {
    /// `quoted`: written in double quotes, so the old filter's `"demo-news"` value is told apart.
    Column {
        name: String,
        quoted: bool,
    },
    Lit(Lit),
    Not(Box<Node>),
    Neg(Box<Node>),
    And(Box<Node>, Box<Node>),
    Or(Box<Node>, Box<Node>),
    Cmp(Box<Node>, CmpOp, Box<Node>),
    Arith(Box<Node>, ArithOp, Box<Node>),
    In {
        subject: Box<Node>,
        list: Vec<Node>,
        negated: bool,
    },
    Between {
        subject: Box<Node>,
        low: Box<Node>,
        high: Box<Node>,
        negated: bool,
    },
    Like {
        subject: Box<Node>,
        pattern: Box<Node>,
        negated: bool,
        case_insensitive: bool,
    },
    IsNull {
        subject: Box<Node>,
        negated: bool,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub(super) struct Node {
    pub kind: Kind,
    pub span: Span,
}

impl Node {
    /// The column names under this node, in order, repeats included.
    pub(super) fn columns<'a>(&'a self, out: &mut Vec<&'a str>) {
        match &self.kind {
            Kind::Column { name, .. } => out.push(name),
            Kind::Lit(_) => {}
            Kind::Not(a) | Kind::Neg(a) => a.columns(out),
            Kind::IsNull { subject, .. } => subject.columns(out),
            Kind::And(a, b) | Kind::Or(a, b) | Kind::Cmp(a, _, b) | Kind::Arith(a, _, b) => {
                a.columns(out);
                b.columns(out);
            }
            Kind::In { subject, list, .. } => {
                subject.columns(out);
                list.iter().for_each(|n| n.columns(out));
            }
            Kind::Between {
                subject, low, high, ..
            } => [subject, low, high].iter().for_each(|n| n.columns(out)),
            Kind::Like {
                subject, pattern, ..
            } => {
                subject.columns(out);
                pattern.columns(out);
            }
        }
    }
}

/// What `--where` accepts, for the error that refuses anything else.
const SUPPORTED: &str = "--where takes and, or, not, parentheses, = != <> < <= > >=, in (...), \
    between ... and ..., like, ilike, is [not] null, + - * / % on numbers, column names \
    (\"quoted\" if need be), numbers, 'text', true, false and null";

/// A reminder under every syntax error: most come from the filter syntax before SQL.
const SQL_HINT: &str = "(SQL as in a WHERE clause: text in single quotes, \
    e.g. domain = 'demo-news' and text_len >= 10)";

pub(super) fn parse(text: &str) -> Result<Node, Problem> {
    let dialect = GenericDialect {};
    let tokens = Tokenizer::new(&dialect, text)
        .tokenize_with_location()
        .map_err(|e| syntax(text, e.location, &e.message.to_lowercase()))?;
    let mut parser = Parser::new(&dialect).with_tokens_with_locations(tokens);
    let expr = parser.parse_expr().map_err(|e| parser_problem(text, e))?;
    let next = parser.peek_token();
    if next.token != Token::EOF {
        return Err(syntax(
            text,
            next.span.start,
            &format!("expected an operator or the end, found `{}`", next.token),
        ));
    }
    convert(&expr, text)
}

fn syntax(text: &str, at: Location, message: &str) -> Problem {
    let start = offset(text, at);
    Problem {
        span: Span {
            start,
            end: start + 1,
        },
        message: format!("syntax error: {message}"),
        notes: vec![SQL_HINT.to_string()],
    }
}

/// sqlparser's error is text ending in " at Line: L, Column: C" (none at the end of input).
fn parser_problem(text: &str, e: ParserError) -> Problem {
    let raw = match e {
        ParserError::TokenizerError(m) | ParserError::ParserError(m) => m,
        ParserError::RecursionLimitExceeded => "too deeply nested".to_string(),
    };
    let (message, at) = match raw.rsplit_once(" at Line: ") {
        Some((m, pos)) => {
            let mut nums = pos.split(", Column: ").map(|n| n.trim().parse::<u64>());
            match (nums.next(), nums.next()) {
                (Some(Ok(line)), Some(Ok(column))) => (m.to_string(), Location::new(line, column)),
                _ => (raw.clone(), Location::new(0, 0)),
            }
        }
        None => (raw, Location::new(0, 0)),
    };
    syntax(text, at, &reworded(&message))
}

/// "Expected: an expression, found: =" as "expected an expression, found `=`".
fn reworded(m: &str) -> String {
    let Some((want, found)) = m
        .strip_prefix("Expected: ")
        .and_then(|r| r.rsplit_once(", found: "))
    else {
        return m.to_string();
    };
    let tick = |s: &str| match s {
        "EOF" => "the end".to_string(),
        s if s.contains(' ') => s.to_string(),
        s => format!("`{s}`"),
    };
    format!("expected {}, found {}", tick(want), tick(found))
}

/// A sqlparser location (1-based line and column, in characters) as an offset into `text`;
/// line 0 means the end of the input.
fn offset(text: &str, at: Location) -> usize {
    if at.line == 0 {
        return text.chars().count();
    }
    let mut off = 0;
    for (i, line) in text.split('\n').enumerate() {
        if i as u64 + 1 == at.line {
            return off
                + (at.column as usize)
                    .saturating_sub(1)
                    .min(line.chars().count());
        }
        off += line.chars().count() + 1;
    }
    text.chars().count()
}

fn span_of(text: &str, e: &impl Spanned) -> Span {
    let s = e.span();
    if s.start.line == 0 {
        return Span {
            start: 0,
            end: text.chars().count(),
        };
    }
    Span {
        start: offset(text, s.start),
        end: offset(text, s.end),
    }
}

fn unsupported(text: &str, e: &Expr, what: String) -> Problem {
    let mut span = span_of(text, e);
    // sqlparser ends a call's (or a subquery's) span before its closing parenthesis.
    if e.to_string().ends_with(')') && text.chars().nth(span.end) == Some(')') {
        span.end += 1;
    }
    Problem {
        span,
        message: format!("{what} is not supported"),
        notes: vec![SUPPORTED.to_string()],
    }
}

fn boxed(e: &Expr, text: &str) -> Result<Box<Node>, Problem> {
    convert(e, text).map(Box::new)
}

fn convert(e: &Expr, text: &str) -> Result<Node, Problem> {
    let span = span_of(text, e);
    let kind = match e {
        Expr::Nested(inner) => return convert(inner, text),
        Expr::Identifier(id) => Kind::Column {
            name: id.value.clone(),
            quoted: id.quote_style.is_some(),
        },
        // `a.b`: no tables to qualify here, so the old `domain = flood.gov` value lands here and
        // is reported as the unknown column `flood.gov`, with the quoting it needs.
        Expr::CompoundIdentifier(ids) => Kind::Column {
            name: ids
                .iter()
                .map(|i| i.value.as_str())
                .collect::<Vec<_>>()
                .join("."),
            quoted: ids.iter().any(|i| i.quote_style.is_some()),
        },
        // A bare `user` parses as SQL's CURRENT_USER function; here it can only be a column.
        Expr::Function(f) if matches!(f.args, sqlparser::ast::FunctionArguments::None) => {
            Kind::Column {
                name: f.name.to_string(),
                quoted: false,
            }
        }
        Expr::Value(v) => Kind::Lit(
            literal(&v.value)
                .ok_or_else(|| unsupported(text, e, format!("the value {}", v.value)))?,
        ),
        Expr::UnaryOp { op, expr } => unary(*op, expr, text, e)?,
        Expr::BinaryOp { left, op, right } => binary(left, op, right, text, e)?,
        Expr::In {
            expr,
            target: InTarget::List(list),
            negated,
            ..
        } => Kind::In {
            subject: boxed(expr, text)?,
            list: list
                .iter()
                .map(|x| convert(x, text))
                .collect::<Result<_, _>>()?,
            negated: *negated,
        },
        Expr::Between {
            expr,
            negated,
            low,
            high,
        } => Kind::Between {
            subject: boxed(expr, text)?,
            low: boxed(low, text)?,
            high: boxed(high, text)?,
            negated: *negated,
        },
        Expr::Like {
            negated,
            any: false,
            expr,
            pattern,
            escape_char,
        } => like(expr, pattern, escape_char, *negated, false, text)?,
        Expr::ILike {
            negated,
            any: false,
            expr,
            pattern,
            escape_char,
        } => like(expr, pattern, escape_char, *negated, true, text)?,
        Expr::IsNull(x) | Expr::IsNotNull(x) => Kind::IsNull {
            subject: boxed(x, text)?,
            negated: matches!(e, Expr::IsNotNull(_)),
        },
        other => return Err(unsupported(text, other, format!("`{other}`"))),
    };
    Ok(Node { kind, span })
}

fn literal(v: &Value) -> Option<Lit> {
    Some(match v {
        Value::Number(s, _) => match s.parse::<i64>() {
            Ok(i) => Lit::Int(i),
            Err(_) => Lit::Float(s.parse::<f64>().ok()?),
        },
        Value::SingleQuotedString(s)
        | Value::EscapedStringLiteral(s)
        | Value::NationalStringLiteral(s)
        | Value::UnicodeStringLiteral(s) => Lit::Text(s.clone()),
        Value::Boolean(b) => Lit::Bool(*b),
        Value::Null => Lit::Null,
        _ => return None,
    })
}

fn unary(op: UnaryOperator, x: &Expr, text: &str, e: &Expr) -> Result<Kind, Problem> {
    let inner = convert(x, text)?;
    Ok(match op {
        UnaryOperator::Not => Kind::Not(Box::new(inner)),
        UnaryOperator::Plus => inner.kind,
        // A negative number is a literal, so it can take a Float32 column's type like any other.
        UnaryOperator::Minus => match inner.kind {
            Kind::Lit(Lit::Int(i)) => Kind::Lit(Lit::Int(-i)),
            Kind::Lit(Lit::Float(f)) => Kind::Lit(Lit::Float(-f)),
            _ => Kind::Neg(Box::new(inner)),
        },
        other => return Err(unsupported(text, e, format!("the operator `{other}`"))),
    })
}

fn binary(
    left: &Expr,
    op: &BinaryOperator,
    right: &Expr,
    text: &str,
    e: &Expr,
) -> Result<Kind, Problem> {
    use BinaryOperator as B;
    let (l, r) = (boxed(left, text)?, boxed(right, text)?);
    let cmp = |op| Kind::Cmp(l.clone(), op, r.clone());
    let arith = |op| Kind::Arith(l.clone(), op, r.clone());
    Ok(match op {
        B::And => Kind::And(l, r),
        B::Or => Kind::Or(l, r),
        B::Eq => cmp(CmpOp::Eq),
        B::NotEq => cmp(CmpOp::Ne),
        B::Lt => cmp(CmpOp::Lt),
        B::LtEq => cmp(CmpOp::Le),
        B::Gt => cmp(CmpOp::Gt),
        B::GtEq => cmp(CmpOp::Ge),
        B::Plus => arith(ArithOp::Add),
        B::Minus => arith(ArithOp::Sub),
        B::Multiply => arith(ArithOp::Mul),
        B::Divide => arith(ArithOp::Div),
        B::Modulo => arith(ArithOp::Rem),
        other => return Err(unsupported(text, e, format!("the operator `{other}`"))),
    })
}

/// Arrow's `like` kernels take `\` as the escape, so that is the one ESCAPE accepted.
fn like(
    subject: &Expr,
    pattern: &Expr,
    escape: &Option<Box<Expr>>,
    negated: bool,
    case_insensitive: bool,
    text: &str,
) -> Result<Kind, Problem> {
    if let Some(esc) = escape {
        let backslash = matches!(&**esc, Expr::Value(v)
            if v.value == Value::SingleQuotedString("\\".into()));
        if !backslash {
            return Err(unsupported(
                text,
                esc,
                format!("ESCAPE {esc} (only '\\' escapes a % or _)"),
            ));
        }
    }
    Ok(Kind::Like {
        subject: boxed(subject, text)?,
        pattern: boxed(pattern, text)?,
        negated,
        case_insensitive,
    })
}
