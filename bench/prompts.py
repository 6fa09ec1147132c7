"""Prompts for the reference comparison and the peer benchmark (written for this project)."""

STORY = (
    "The lighthouse keeper had lived alone on the rock for eleven winters. Every evening he climbed "
    "the hundred and twelve steps, trimmed the wick, wound the clockwork that turned the great lens, "
    "and wrote three lines in the logbook: the wind, the sea, and the ships he had seen. One night in "
    "November the lamp would not light. He checked the oil, the wick and the glass, and found nothing "
    "wrong. Far out in the dark, a small boat was rowing toward the reef, and"
)

CODE = '''def merge_intervals(intervals):
    """Merge overlapping [start, end] intervals and return them sorted."""
    if not intervals:
        return []
    intervals = sorted(intervals, key=lambda iv: iv[0])
    merged = [list(intervals[0])]
    for start, end in intervals[1:]:
        last = merged[-1]
        if start <= last[1]:
            last[1] = max(last[1], end)
        else:
            merged.append([start, end])
    return merged


def test_merge_intervals():
    assert merge_intervals([[1, 3], [2, 6], [8, 10]]) == [[1, 6], [8, 10]]
    assert merge_intervals([]) == []
'''

FACTS = (
    "A transformer language model reads a sequence of tokens and predicts the next one. Each layer "
    "first normalises its input, then lets every position attend to the earlier positions through "
    "several attention heads, and finally applies a feed-forward network to each position on its own. "
    "During generation the keys and values of past positions are kept in a cache, so each new token "
    "costs one pass through the weights. Speculative decoding uses a small draft model to guess "
    "several tokens ahead; the large model then checks all of them in a single forward pass and keeps "
    "the longest prefix it agrees with, which"
)

# Longer than Gemma 3's 512-token sliding window (about 750 tokens with its tokenizer).
LONG = " ".join([
    "Chapter one. The town of Harrow Vale sat where two rivers met, and for as long as anyone could "
    "remember the people there had argued about which river the town belonged to. The northern river "
    "was cold and fast and brought timber down from the hills; the eastern river was slow and brown "
    "and carried barges of grain to the coast. The mill stood on the northern bank, the market on the "
    "eastern one, and the bridge between them was repaired every spring by whichever side had won the "
    "argument the year before.",
    "Mara Quill was twelve when she found the map. It was folded inside a book about beekeeping that "
    "nobody had borrowed from the library in forty years, and it showed Harrow Vale as it must have "
    "looked long before the bridge: a single river, wide and shallow, with a chain of small islands "
    "where the two rivers now met. On the largest island someone had drawn a circle in brown ink and "
    "written a single word beside it, in letters so small that she needed her grandmother's glass to "
    "read them. The word was 'orchard'.",
    "She showed the map to her friend Tobin, who lived above the bakery and knew everything about the "
    "town that could be learned by listening to customers. Tobin said that the islands were still "
    "there, under the mill pond, and that in very dry summers the tops of old stone walls could be "
    "seen when the water was low. His uncle had once pulled a rusted pruning hook out of the mud "
    "there, and had hung it above the bakery door for luck. Mara asked whether anyone had ever dug "
    "near the walls. Tobin laughed and said that nobody dug anywhere near the mill, because the miller "
    "owned the pond, and the miller did not like visitors, children, or questions.",
    "That summer was the driest anyone could remember. The northern river shrank to a string of pools, "
    "the barges on the eastern river ran aground twice a week, and the mill wheel stopped turning in "
    "the middle of July. One morning Mara woke before dawn, took the map, a trowel, a lantern and two "
    "apples, and walked down to the pond. The water had drawn back so far that a line of grey stones "
    "stood out of the mud like the spine of some buried animal. She followed it, step by careful step, "
    "until she reached the place where the circle on the map should be. There, half sunk in the "
    "cracked earth, was a low wall of fitted stones, and inside it the black stumps of trees planted "
    "in rows.",
    "She knelt and began to dig beside the nearest stump. The mud was hard on top and soft beneath, "
    "and it smelled of old leaves. After an hour her trowel struck something that was not a stone: a "
    "wooden box bound with iron, no bigger than a loaf of bread. The lid was swollen shut. She carried "
    "it back along the line of stones as the sun came up, and when she reached the bank she found the "
    "miller waiting for her, leaning on his stick, with an expression she could not read. He looked at "
    "the box, then at the map sticking out of her pocket, and then he did something that nobody in "
    "Harrow Vale had seen him do in twenty years. He smiled, and said that he had been waiting a very "
    "long time for somebody to find",
])

PROMPTS = {"story": STORY, "code": CODE, "facts": FACTS}
