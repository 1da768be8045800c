//! A `Node` tree checked against a table's schema, into a `Plan` the kernels can run: each
//! column resolved to its index, each comparison given one Arrow type for both sides (numbers
//! widened, a literal cast once here rather than per batch), `in` and `between` spelled as the
//! comparisons they mean. Every type error is found here, before a row is read.
//!
//! Reads and writes nothing.

use super::Problem;
use super::parse::{ArithOp, CmpOp, Kind, Lit, Node};
use arrow::array::{ArrayRef, BooleanArray, Float64Array, Int64Array, StringArray};
use arrow::datatypes::{DataType, Schema};
use std::sync::Arc;

/// What a value is, for type checks: numbers of any width compare with each other, text with
/// text, booleans with booleans.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Ty {
    Int,
    /// Kept apart from Float64 so that `score >= 0.9` on a Float32 column compares 0.9 as a
    /// Float32, as the stored values were written: widened, 0.9f32 is 0.8999999761.
    F32,
    F64,
    Text,
    Bool,
    Null,
    /// Lists, structs, times, binary: only `is null` applies.
    Other,
}

impl Ty {
    fn of(dt: &DataType) -> Ty {
        use DataType as D;
        match dt {
            D::Int8 | D::Int16 | D::Int32 | D::Int64 => Ty::Int,
            D::UInt8 | D::UInt16 | D::UInt32 | D::UInt64 => Ty::Int,
            D::Float32 => Ty::F32,
            D::Float16 | D::Float64 | D::Decimal32(..) | D::Decimal64(..) => Ty::F64,
            D::Decimal128(..) | D::Decimal256(..) => Ty::F64,
            D::Utf8 | D::LargeUtf8 | D::Utf8View => Ty::Text,
            D::Dictionary(_, v) => Ty::of(v),
            D::Boolean => Ty::Bool,
            D::Null => Ty::Null,
            _ => Ty::Other,
        }
    }

    /// The one Arrow type values of this kind are computed in.
    fn arrow(self) -> Option<DataType> {
        Some(match self {
            Ty::Int => DataType::Int64,
            Ty::F32 => DataType::Float32,
            Ty::F64 => DataType::Float64,
            Ty::Text => DataType::Utf8,
            Ty::Bool => DataType::Boolean,
            Ty::Null | Ty::Other => return None,
        })
    }

    fn is_num(self) -> bool {
        matches!(self, Ty::Int | Ty::F32 | Ty::F64)
    }

    fn word(self) -> &'static str {
        match self {
            Ty::Int | Ty::F32 | Ty::F64 => "a number",
            Ty::Text => "text",
            Ty::Bool => "true/false",
            Ty::Null | Ty::Other => "null",
        }
    }

    /// Before "column" in an error: "text column `domain` (Utf8)".
    fn adjective(self) -> &'static str {
        match self {
            Ty::Int | Ty::F32 | Ty::F64 => "numeric ",
            Ty::Text => "text ",
            Ty::Bool => "true/false ",
            Ty::Null | Ty::Other => "",
        }
    }
}

/// What the kernels run: values of one Arrow type on both sides of each operator.
#[derive(Debug, Clone)]
pub(super) enum Plan {
    /// `to`: the type to compute in, None to take the column as stored (`is null`).
    Column {
        index: usize,
        to: Option<DataType>,
    },
    /// One value (a length-1 array), already of the type it is compared in.
    Lit(ArrayRef),
    /// SQL's NULL, or anything computed from it: unknown for every row.
    Null,
    Cast(Box<Plan>, DataType),
    Not(Box<Plan>),
    Neg(Box<Plan>),
    And(Box<Plan>, Box<Plan>),
    Or(Box<Plan>, Box<Plan>),
    /// `or` over many: an `in` list, evaluated as a loop, not a deep tree.
    Any(Vec<Plan>),
    Cmp(Box<Plan>, CmpOp, Box<Plan>),
    Arith(Box<Plan>, ArithOp, Box<Plan>),
    Like {
        subject: Box<Plan>,
        pattern: Box<Plan>,
        negated: bool,
        case_insensitive: bool,
    },
    IsNull {
        subject: Box<Plan>,
        negated: bool,
    },
}

/// A compiled part with what the checks above it need to know.
#[derive(Clone)]
struct Typed {
    plan: Plan,
    ty: Ty,
    /// Written as a number in the text: takes the type of what it is compared with.
    literal: bool,
    /// How an error names it: "text column `domain` (Utf8)", "the number 10".
    desc: String,
    /// As written in the expression.
    src: String,
}

impl Typed {
    fn condition(plan: Plan) -> Self {
        Typed {
            plan,
            ty: Ty::Bool,
            literal: false,
            desc: String::new(),
            src: String::new(),
        }
    }

    fn null() -> Self {
        Typed {
            plan: Plan::Null,
            ty: Ty::Null,
            literal: true,
            desc: "null".into(),
            src: "null".into(),
        }
    }

    /// Its plan computing in `dt`: a literal is cast now, a column reads as `dt`.
    fn cast(self, dt: &DataType) -> Plan {
        if self.ty.arrow().as_ref() == Some(dt) {
            return self.plan;
        }
        match self.plan {
            Plan::Lit(a) => match arrow::compute::cast(&a, dt) {
                Ok(c) => Plan::Lit(c),
                Err(_) => Plan::Cast(Box::new(Plan::Lit(a)), dt.clone()),
            },
            Plan::Column { index, .. } => Plan::Column {
                index,
                to: Some(dt.clone()),
            },
            p => Plan::Cast(Box::new(p), dt.clone()),
        }
    }
}

/// The type two numbers are compared or combined in: integers stay exact, a Float32 column
/// meets a literal as Float32, anything else is Float64.
fn num_type(a: &Typed, b: &Typed) -> DataType {
    match (a.ty, b.ty) {
        (Ty::Int, Ty::Int) => DataType::Int64,
        (Ty::F32, Ty::F32) => DataType::Float32,
        (Ty::F32, _) if b.literal => DataType::Float32,
        (_, Ty::F32) if a.literal => DataType::Float32,
        _ => DataType::Float64,
    }
}

struct Ctx<'a> {
    root: &'a Node,
    schema: &'a Schema,
    chars: Vec<char>,
    table: &'a str,
}

/// `root` checked against `schema` (of `table`, as errors name it), as a plan whose result is
/// a condition.
pub(super) fn compile(
    root: &Node,
    schema: &Schema,
    text: &str,
    table: &str,
) -> Result<Plan, Problem> {
    let cx = Ctx {
        root,
        schema,
        chars: text.chars().collect(),
        table,
    };
    let t = cx.node(root)?;
    match t.ty {
        Ty::Bool | Ty::Null => Ok(t.plan),
        _ => Err(cx.problem(
            root,
            format!(
                "the filter must be a condition, true or false for each row, not {}",
                t.desc
            ),
            vec![],
        )),
    }
}

impl Ctx<'_> {
    fn source(&self, n: &Node) -> String {
        let end = n.span.end.min(self.chars.len());
        self.chars[n.span.start.min(end)..end].iter().collect()
    }

    fn problem(&self, n: &Node, message: String, notes: Vec<String>) -> Problem {
        Problem {
            span: n.span,
            message,
            notes,
        }
    }

    fn node(&self, n: &Node) -> Result<Typed, Problem> {
        match &n.kind {
            Kind::Column { name, .. } => self.column(n, name),
            Kind::Lit(l) => Ok(self.literal(n, l)),
            Kind::Not(a) => {
                let a = self.condition(a, "not")?;
                Ok(Typed::condition(Plan::Not(Box::new(a))))
            }
            Kind::And(a, b) | Kind::Or(a, b) => {
                let word = if matches!(n.kind, Kind::And(..)) {
                    "and"
                } else {
                    "or"
                };
                let (a, b) = (
                    Box::new(self.condition(a, word)?),
                    Box::new(self.condition(b, word)?),
                );
                Ok(Typed::condition(match n.kind {
                    Kind::And(..) => Plan::And(a, b),
                    _ => Plan::Or(a, b),
                }))
            }
            Kind::Neg(a) => {
                let t = self.node(a)?;
                self.numeric(a, &t, "-")?;
                Ok(Typed {
                    plan: Plan::Neg(Box::new(t.plan)),
                    literal: false,
                    desc: self.expr_desc(n, t.ty),
                    src: self.source(n),
                    ..t
                })
            }
            Kind::Cmp(a, op, b) => self.compare(n, self.node(a)?, *op, self.node(b)?),
            Kind::Arith(a, op, b) => self.arith(n, a, *op, b),
            Kind::In {
                subject,
                list,
                negated,
            } => self.in_list(subject, list, *negated),
            Kind::Between {
                subject,
                low,
                high,
                negated,
            } => {
                let s = self.node(subject)?;
                let ge = self.compare(n, s.clone(), CmpOp::Ge, self.node(low)?)?;
                let le = self.compare(n, s, CmpOp::Le, self.node(high)?)?;
                let both = Plan::And(Box::new(ge.plan), Box::new(le.plan));
                Ok(Typed::condition(negate(both, *negated)))
            }
            Kind::Like {
                subject,
                pattern,
                negated,
                case_insensitive,
            } => self.like(subject, pattern, *negated, *case_insensitive),
            Kind::IsNull { subject, negated } => {
                let plan = Box::new(self.node(subject)?.plan);
                Ok(Typed::condition(Plan::IsNull {
                    subject: plan,
                    negated: *negated,
                }))
            }
        }
    }

    fn column(&self, n: &Node, name: &str) -> Result<Typed, Problem> {
        let Ok(index) = self.schema.index_of(name) else {
            return Err(self.unknown_column(n, name));
        };
        let dt = self.schema.field(index).data_type();
        let ty = Ty::of(dt);
        Ok(Typed {
            plan: Plan::Column {
                index,
                to: ty.arrow(),
            },
            ty,
            literal: false,
            desc: format!("{}column `{name}` ({dt})", ty.adjective()),
            src: self.source(n),
        })
    }

    fn literal(&self, n: &Node, l: &Lit) -> Typed {
        let src = self.source(n);
        let one = |a: ArrayRef, ty, desc: String| Typed {
            plan: Plan::Lit(a),
            ty,
            literal: true,
            desc,
            src: src.clone(),
        };
        match l {
            Lit::Int(i) => one(
                Arc::new(Int64Array::from(vec![*i])),
                Ty::Int,
                format!("the number {src}"),
            ),
            Lit::Float(f) => one(
                Arc::new(Float64Array::from(vec![*f])),
                Ty::F64,
                format!("the number {src}"),
            ),
            Lit::Text(s) => one(
                Arc::new(StringArray::from(vec![s.as_str()])),
                Ty::Text,
                format!("the text {src}"),
            ),
            Lit::Bool(b) => one(
                Arc::new(BooleanArray::from(vec![*b])),
                Ty::Bool,
                format!("the value {src}"),
            ),
            Lit::Null => Typed::null(),
        }
    }

    fn expr_desc(&self, n: &Node, ty: Ty) -> String {
        format!("`{}` ({})", self.source(n), ty.word())
    }

    /// An operand of `and`, `or`, `not`: a condition or NULL.
    fn condition(&self, n: &Node, op: &str) -> Result<Plan, Problem> {
        let t = self.node(n)?;
        match t.ty {
            Ty::Bool | Ty::Null => Ok(t.plan),
            _ => Err(self.problem(
                n,
                format!("`{op}` needs a condition{}, not {}", on_each(op), t.desc),
                vec![],
            )),
        }
    }

    fn numeric(&self, n: &Node, t: &Typed, op: &str) -> Result<(), Problem> {
        match t.ty {
            Ty::Int | Ty::F32 | Ty::F64 | Ty::Null => Ok(()),
            _ => Err(self.problem(n, format!("`{op}` needs numbers, not {}", t.desc), vec![])),
        }
    }

    fn arith(&self, n: &Node, a: &Node, op: ArithOp, b: &Node) -> Result<Typed, Problem> {
        let sym = match op {
            ArithOp::Add => "+",
            ArithOp::Sub => "-",
            ArithOp::Mul => "*",
            ArithOp::Div => "/",
            ArithOp::Rem => "%",
        };
        let (l, r) = (self.node(a)?, self.node(b)?);
        self.numeric(a, &l, sym)?;
        self.numeric(b, &r, sym)?;
        if l.ty == Ty::Null || r.ty == Ty::Null {
            return Ok(Typed::null());
        }
        // Division is real division: an integer `/ 0` would be an Arrow error for the whole
        // batch, where a float gives inf or NaN for that row alone.
        let dt = match op {
            ArithOp::Div | ArithOp::Rem => DataType::Float64,
            _ => num_type(&l, &r),
        };
        let ty = Ty::of(&dt);
        let plan = Plan::Arith(Box::new(l.cast(&dt)), op, Box::new(r.cast(&dt)));
        Ok(Typed {
            plan,
            ty,
            literal: false,
            desc: self.expr_desc(n, ty),
            src: self.source(n),
        })
    }
}

impl Ctx<'_> {
    fn unknown_column(&self, n: &Node, name: &str) -> Problem {
        super::hints::unknown_column(self.root, self.schema, &self.chars, self.table, n, name)
    }

    /// `a op b` with both sides in one type; a NULL on either side is unknown for every row.
    fn compare(&self, n: &Node, l: Typed, op: CmpOp, r: Typed) -> Result<Typed, Problem> {
        match (l.ty, r.ty) {
            (Ty::Null, _) | (_, Ty::Null) => Ok(Typed::condition(Plan::Null)),
            (a, b) if a.is_num() && b.is_num() => {
                let dt = num_type(&l, &r);
                let plan = Plan::Cmp(Box::new(l.cast(&dt)), op, Box::new(r.cast(&dt)));
                Ok(Typed::condition(plan))
            }
            (Ty::Text, Ty::Text) | (Ty::Bool, Ty::Bool) => Ok(Typed::condition(Plan::Cmp(
                Box::new(l.plan),
                op,
                Box::new(r.plan),
            ))),
            (Ty::Other, _) | (_, Ty::Other) => {
                let t = if l.ty == Ty::Other { &l } else { &r };
                Err(self.problem(
                    n,
                    format!("{} cannot be compared", t.desc),
                    vec![
                        "comparisons, in, between and like take numbers, text and true/false; \
                         is null takes any column"
                            .into(),
                    ],
                ))
            }
            _ => Err(self.mismatch(n, &l, &r)),
        }
    }

    /// Text against a number: named with the column's type, and the likely fix.
    fn mismatch(&self, n: &Node, l: &Typed, r: &Typed) -> Problem {
        let mut notes = vec![];
        for (a, b) in [(l, r), (r, l)] {
            if a.ty == Ty::Text && b.ty.is_num() && b.literal {
                notes.push(format!("to compare as text, quote the number: '{}'", b.src));
            }
            if a.ty.is_num() && !a.literal && b.ty == Ty::Text && b.literal {
                notes.push(format!(
                    "{} holds numbers: compare it with a number, without quotes",
                    a.desc
                ));
            }
        }
        self.problem(
            n,
            format!("cannot compare {} with {}", l.desc, r.desc),
            notes,
        )
    }

    /// `s in (a, b)` is `s = a or s = b`, and `not in` its negation: with SQL's NULLs, a
    /// NULL in the list leaves a row that matches nothing unknown, so `not in` drops it.
    fn in_list(&self, s: &Node, list: &[Node], negated: bool) -> Result<Typed, Problem> {
        let subject = self.node(s)?;
        let mut eqs = Vec::with_capacity(list.len());
        for item in list {
            let t = self.node(item)?;
            // The caret goes under the item that does not fit, not the whole list.
            eqs.push(self.compare(item, subject.clone(), CmpOp::Eq, t)?.plan);
        }
        Ok(Typed::condition(negate(Plan::Any(eqs), negated)))
    }

    fn like(
        &self,
        s: &Node,
        p: &Node,
        negated: bool,
        case_insensitive: bool,
    ) -> Result<Typed, Problem> {
        let (subject, pattern) = (self.node(s)?, self.node(p)?);
        let op = if case_insensitive { "ilike" } else { "like" };
        for (n, t) in [(s, &subject), (p, &pattern)] {
            if !matches!(t.ty, Ty::Text | Ty::Null) {
                return Err(self.problem(
                    n,
                    format!("`{op}` matches text, not {}", t.desc),
                    vec![],
                ));
            }
        }
        if subject.ty == Ty::Null || pattern.ty == Ty::Null {
            return Ok(Typed::condition(Plan::Null));
        }
        Ok(Typed::condition(Plan::Like {
            subject: Box::new(subject.plan),
            pattern: Box::new(pattern.plan),
            negated,
            case_insensitive,
        }))
    }
}

fn on_each(op: &str) -> &'static str {
    if op == "not" { "" } else { " on each side" }
}

fn negate(p: Plan, negated: bool) -> Plan {
    if negated { Plan::Not(Box::new(p)) } else { p }
}
