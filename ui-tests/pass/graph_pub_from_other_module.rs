// A `pub` graph (and its node enum) used from another module.
mod model {
    use tea::prelude::*;

    #[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
    pub struct Article {
        pub title: String,
        #[reducer(append)]
        pub log: Vec<String>,
    }
}

mod flows {
    use super::model::{Article, ArticleUpdate};
    use tea::prelude::*;

    fn title(s: &Article) -> ArticleUpdate {
        Article::update().title(s.title.to_uppercase()).log(vec!["title".into()])
    }
    fn publish(_: &Article) -> ArticleUpdate {
        Article::update().log(vec!["publish".into()])
    }

    graph! {
        /// Capitalises the title and publishes.
        pub Publish for Article {
            start -> title;
            title -> publish;
            publish -> end;
        }
    }
}

mod app {
    use super::flows::{Publish, PublishNode};
    use super::model::Article;

    pub fn run() {
        let out = Publish::builder().build().invoke(Article { title: "tea".into(), ..Article::default() }).unwrap();
        assert_eq!(out.title, "TEA");
        assert_eq!(out.log, ["title", "publish"]);
        assert_eq!(PublishNode::ALL, [PublishNode::Title, PublishNode::Publish]);
        assert_eq!(Publish::NAME, "Publish");
    }
}

fn main() {
    app::run();
}
