//! A `Plan` run on one RecordBatch with Arrow's compute kernels: each operator is one
//! vectorised pass over the batch's columns (a literal stays a one-value `Scalar`, never
//! repeated per row), `and`/`or`/`not` use Kleene logic so NULLs behave as in SQL, and the
//! resulting mask counts unknown as false.
//!
//! Reads only the batch; writes and caches nothing.

use super::compile::Plan;
use super::parse::{ArithOp, CmpOp};
use arrow::array::{Array, ArrayRef, AsArray, BooleanArray, Datum, RecordBatch, Scalar};
use arrow::compute::kernels::{cmp, comparison, numeric};
use arrow::error::ArrowError;
use std::sync::Arc;

/// A value as the kernels take it.
enum Val {
    /// One value per row.
    Rows(ArrayRef),
    /// One value for every row (a literal, or computed from literals only).
    One(ArrayRef),
    /// NULL for every row.
    Null,
}

impl Val {
    fn datum(&self) -> Box<dyn Datum + '_> {
        match self {
            Val::Rows(a) => Box::new(a),
            Val::One(a) => Box::new(Scalar::new(a)),
            Val::Null => unreachable!("NULL operands are answered before a kernel runs"),
        }
    }

    /// Rows when either side is rows: a kernel on two scalars gives one value.
    fn like(a: &Val, b: &Val, out: ArrayRef) -> Val {
        match (a, b) {
            (Val::One(_), Val::One(_)) => Val::One(out),
            _ => Val::Rows(out),
        }
    }

    /// As a condition with one entry per row (unknown is a null entry).
    fn rows(self, n: usize) -> Result<BooleanArray, ArrowError> {
        Ok(match self {
            Val::Rows(a) => a.as_boolean().clone(),
            Val::Null => BooleanArray::new_null(n),
            Val::One(a) => {
                let b = a.as_boolean();
                if b.is_null(0) {
                    BooleanArray::new_null(n)
                } else {
                    BooleanArray::from(vec![b.value(0); n])
                }
            }
        })
    }
}

/// The rows of `b` the plan keeps: its condition, with unknown (NULL) as false.
pub(super) fn mask(plan: &Plan, b: &RecordBatch) -> Result<BooleanArray, ArrowError> {
    let m = eval(plan, b)?.rows(b.num_rows())?;
    Ok(match m.null_count() {
        0 => m,
        _ => arrow::compute::prep_null_mask_filter(&m),
    })
}

fn eval(plan: &Plan, b: &RecordBatch) -> Result<Val, ArrowError> {
    let n = b.num_rows();
    Ok(match plan {
        Plan::Column { index, to } => {
            let col = b.column(*index);
            match to {
                Some(dt) if col.data_type() != dt => Val::Rows(arrow::compute::cast(col, dt)?),
                _ => Val::Rows(col.clone()),
            }
        }
        Plan::Lit(a) => Val::One(a.clone()),
        Plan::Null => Val::Null,
        Plan::Cast(p, dt) => match eval(p, b)? {
            Val::Rows(a) => Val::Rows(arrow::compute::cast(&a, dt)?),
            Val::One(a) => Val::One(arrow::compute::cast(&a, dt)?),
            Val::Null => Val::Null,
        },
        Plan::Not(p) => match eval(p, b)? {
            Val::Null => Val::Null,
            v => Val::Rows(Arc::new(arrow::compute::not(&v.rows(n)?)?)),
        },
        Plan::Neg(p) => match eval(p, b)? {
            Val::Rows(a) => Val::Rows(numeric::neg(&a)?),
            Val::One(a) => Val::One(numeric::neg(&a)?),
            Val::Null => Val::Null,
        },
        Plan::And(x, y) => {
            let (x, y) = (eval(x, b)?.rows(n)?, eval(y, b)?.rows(n)?);
            Val::Rows(Arc::new(arrow::compute::and_kleene(&x, &y)?))
        }
        Plan::Or(x, y) => {
            let (x, y) = (eval(x, b)?.rows(n)?, eval(y, b)?.rows(n)?);
            Val::Rows(Arc::new(arrow::compute::or_kleene(&x, &y)?))
        }
        Plan::Any(items) => {
            // An empty list cannot be written in SQL; `or` over nothing is false.
            let mut acc = BooleanArray::from(vec![false; n]);
            for p in items {
                acc = arrow::compute::or_kleene(&acc, &eval(p, b)?.rows(n)?)?;
            }
            Val::Rows(Arc::new(acc))
        }
        Plan::Cmp(x, op, y) => binary(&eval(x, b)?, &eval(y, b)?, |l, r| compare(op, l, r))?,
        Plan::Arith(x, op, y) => binary(&eval(x, b)?, &eval(y, b)?, |l, r| arith(op, l, r))?,
        Plan::Like {
            subject,
            pattern,
            negated,
            case_insensitive,
        } => binary(&eval(subject, b)?, &eval(pattern, b)?, |l, r| {
            like(*negated, *case_insensitive, l, r)
        })?,
        Plan::IsNull { subject, negated } => {
            let a = match eval(subject, b)? {
                Val::Rows(a) => a,
                Val::One(a) => return is_null(&a, *negated).map(Val::One),
                Val::Null => return Ok(Val::One(Arc::new(BooleanArray::from(vec![!negated])))),
            };
            Val::Rows(is_null(&a, *negated)?)
        }
    })
}

/// `l op r`, row by row.
fn compare(op: &CmpOp, l: &dyn Datum, r: &dyn Datum) -> Result<ArrayRef, ArrowError> {
    let f = match op {
        CmpOp::Eq => cmp::eq,
        CmpOp::Ne => cmp::neq,
        CmpOp::Lt => cmp::lt,
        CmpOp::Le => cmp::lt_eq,
        CmpOp::Gt => cmp::gt,
        CmpOp::Ge => cmp::gt_eq,
    };
    Ok(Arc::new(f(l, r)?))
}

/// `l op r`, row by row.
fn arith(op: &ArithOp, l: &dyn Datum, r: &dyn Datum) -> Result<ArrayRef, ArrowError> {
    match op {
        ArithOp::Add => numeric::add(l, r),
        ArithOp::Sub => numeric::sub(l, r),
        ArithOp::Mul => numeric::mul(l, r),
        ArithOp::Div => numeric::div(l, r),
        ArithOp::Rem => numeric::rem(l, r),
    }
}

/// `l [NOT] [I]LIKE r`, row by row.
fn like(
    negated: bool,
    case_insensitive: bool,
    l: &dyn Datum,
    r: &dyn Datum,
) -> Result<ArrayRef, ArrowError> {
    let f = match (negated, case_insensitive) {
        (false, false) => comparison::like,
        (false, true) => comparison::ilike,
        (true, false) => comparison::nlike,
        (true, true) => comparison::nilike,
    };
    Ok(Arc::new(f(l, r)?))
}

/// A kernel on two values; NULL on either side is NULL, without running it.
fn binary(
    l: &Val,
    r: &Val,
    kernel: impl Fn(&dyn Datum, &dyn Datum) -> Result<ArrayRef, ArrowError>,
) -> Result<Val, ArrowError> {
    if matches!(l, Val::Null) || matches!(r, Val::Null) {
        return Ok(Val::Null);
    }
    let out = kernel(l.datum().as_ref(), r.datum().as_ref())?;
    Ok(Val::like(l, r, out))
}

fn is_null(a: &ArrayRef, negated: bool) -> Result<ArrayRef, ArrowError> {
    Ok(Arc::new(if negated {
        arrow::compute::is_not_null(a)?
    } else {
        arrow::compute::is_null(a)?
    }))
}
