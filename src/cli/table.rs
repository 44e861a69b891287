//! Plain-text tables for the CLI (`herald status`, `herald dlq list`): every column as wide as its
//! widest cell, so long sink names or ids keep the columns aligned instead of pushing a row out.

/// How a column's cells sit in its width.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Align {
    /// Text (names, ids, messages).
    Left,
    /// Numbers, so their digits line up.
    Right,
}

/// A header and rows of cells, laid out when printed.
#[derive(Debug)]
pub(super) struct Table {
    columns: Vec<(&'static str, Align)>,
    rows: Vec<Vec<String>>,
}

/// Between two columns.
const GAP: &str = "  ";

impl Table {
    /// A table with these column headers.
    pub(super) fn new(columns: &[(&'static str, Align)]) -> Self {
        Self {
            columns: columns.to_vec(),
            rows: Vec::new(),
        }
    }

    /// Adds a row (missing cells are empty, extra ones ignored).
    pub(super) fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// The header line and one line per row, without trailing blanks.
    pub(super) fn lines(&self) -> Vec<String> {
        let cell = |row: &[String], i: usize| row.get(i).map_or("", String::as_str).to_owned();
        let header: Vec<String> = self.columns.iter().map(|(h, _)| (*h).to_owned()).collect();
        let widths: Vec<usize> = (0..self.columns.len())
            .map(|i| {
                std::iter::once(&header)
                    .chain(&self.rows)
                    .map(|r| cell(r, i).chars().count())
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        std::iter::once(&header)
            .chain(&self.rows)
            .map(|row| {
                let mut line = String::new();
                for (i, ((_, align), width)) in self.columns.iter().zip(&widths).enumerate() {
                    if i > 0 {
                        line.push_str(GAP);
                    }
                    let text = cell(row, i);
                    let pad = " ".repeat(width.saturating_sub(text.chars().count()));
                    match align {
                        Align::Left => {
                            line.push_str(&text);
                            line.push_str(&pad);
                        }
                        Align::Right => {
                            line.push_str(&pad);
                            line.push_str(&text);
                        }
                    }
                }
                line.trim_end().to_owned()
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::{Align, Table};

    #[test]
    fn columns_take_the_width_of_their_widest_cell() {
        let mut t = Table::new(&[("SINK", Align::Left), ("LAG", Align::Right)]);
        t.row(vec!["a-very-long-sink-name".into(), "7".into()]);
        t.row(vec!["b".into(), "12345".into()]);
        assert_eq!(
            t.lines(),
            [
                "SINK                     LAG",
                "a-very-long-sink-name      7",
                "b                      12345",
            ]
        );
    }
}
