//! The three-valued evaluator (filled in next).
