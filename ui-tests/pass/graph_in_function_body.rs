// A graph declared inside a function body, its node functions local to that body.
use tea::prelude::*;

#[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct Count {
    #[reducer(sum)]
    n: u32,
}

fn count_to(limit: u32) -> u32 {
    fn add(_: &Count) -> CountUpdate {
        Count::update().n(1)
    }
    fn enough(s: &Count) -> bool {
        s.n >= 3
    }
    fn decide(s: &Count) -> Command<LocalNode> {
        if s.n % 2 == 0 {
            Command::goto(LocalNode::Add)
        } else {
            Command::goto(LocalNode::Add).update(Count::update().n(10))
        }
    }

    graph! {
        Local for Count {
            start -> add;
            add -> end if enough;
            add -> decide;
            decide -> add | end;
        }
    }

    Local::builder().build().invoke(Count { n: limit }).unwrap().n
}

fn main() {
    assert_eq!(count_to(0), 12, "add 1, decide +10, add 1");
    assert_eq!(count_to(7), 8);

    // And one right in `main`.
    fn only(_: &Count) -> CountUpdate {
        Count::update().n(5)
    }
    graph! {
        InMain for Count {
            start -> only;
            only -> end;
        }
    }
    assert_eq!(InMain::builder().build().invoke(Count::default()).unwrap().n, 5);
    assert_eq!(InMainNode::Only.name(), "only");
}
